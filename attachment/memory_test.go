package attachment_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/attachment"
	"github.com/turnstile-go/turnstile/attachment/attachmenttest"
)

func TestMemoryStore(t *testing.T) {
	t.Parallel()
	attachmenttest.Run(t, func(*testing.T) attachment.Store { return attachment.NewMemoryStore() })
}

func TestMemoryStoreShared(t *testing.T) {
	t.Parallel()
	shared := attachment.NewMemoryStore()
	attachmenttest.Run(t, func(*testing.T) attachment.Store { return shared })
}

func TestMemoryStoreMaxSize(t *testing.T) {
	t.Parallel()
	s := attachment.NewMemoryStore()
	s.MaxSize = 10
	owner := attachment.Owner{App: "a", User: "u"}
	_, err := s.Put(context.Background(), owner, "", "", strings.NewReader("0123456789x"))
	require.ErrorIs(t, err, attachment.ErrTooLarge)
	ref, err := attachment.PutBytes(context.Background(), s, owner, "", "", []byte("0123456789"))
	require.NoError(t, err)
	require.EqualValues(t, 10, ref.Size)
	require.Equal(t, attachment.IDOf([]byte("0123456789")), ref.ID)
}
