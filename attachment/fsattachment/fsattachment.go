// Package fsattachment is an attachment.Store in a directory of a filesystem: a local disk for
// one process, or a shared filesystem (NFS, a mounted volume) that every worker reaches.
//
// # Layout
//
// Each attachment is one file, ROOT/APP/OWNER/DIGEST, where APP is the SHA-256 (hex) of the
// app, OWNER the SHA-256 of the app and the user, and DIGEST the 64 hex digits of the content's
// id: user and app ids never become path elements, so no id can reach outside ROOT or another
// owner's directory, whatever bytes it holds. The file holds a header line of JSON (the Ref's
// name, media type and size) and then the content; its modification time is the time of the
// attachment's last Put (attachment.Retention.DeleteIdle).
//
// Put writes the content to a temporary file under ROOT/tmp while it hashes it, syncs it to
// disk, and then links it into place with os.Link, which fails when the name exists: the first
// Put of some bytes wins whole, a concurrent Put of the same bytes finds it, and no reader ever
// sees part of a file. A Put that a crash cuts short leaves at most a temporary file, which New
// removes once it is an hour old.
//
// Files are removed one by one: DeleteIdle may remove an attachment whose Put of the same
// bytes refreshed it a moment before (the Put's Ref then names an attachment that is gone, as
// after a DeleteIdle a moment later), and a Put racing DeleteUser may keep its attachment.
// attachment/sqlattachment decides each attachment in a transaction instead.
package fsattachment

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/turnstile-go/turnstile/attachment"
)

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// MaxSize bounds the bytes of one attachment; 0 means attachment.DefaultMaxSize.
	MaxSize int64
}

// Store is an attachment.Store in a directory. It is safe for concurrent use by many
// goroutines, and by processes sharing the directory; build one with New.
type Store struct {
	root string
	opts Options
	now  func() time.Time
}

var _ attachment.Retention = (*Store)(nil)

// tmpDir is the directory of Put's temporary files, under the root.
const tmpDir = "tmp"

// staleTemp is the age past which New removes a temporary file: a Put that long is gone.
const staleTemp = time.Hour

// maxTries bounds the times Put places its file when deletions keep removing it.
const maxTries = 10

// maxHeader bounds the header line of an attachment file.
const maxHeader = 4 << 10

// New returns a Store in dir, creating dir (mode 0o700) and its temporary directory when
// missing, and removing temporary files over an hour old that crashed Puts left. Errors: an
// empty dir, a negative MaxSize, the filesystem's.
func New(dir string, opts Options) (*Store, error) {
	switch {
	case dir == "":
		return nil, errors.New("fsattachment: empty directory")
	case opts.MaxSize < 0:
		return nil, fmt.Errorf("fsattachment: Options.MaxSize: %d is negative", opts.MaxSize)
	}
	s := &Store{root: dir, opts: opts, now: time.Now}
	if err := os.MkdirAll(filepath.Join(dir, tmpDir), 0o700); err != nil {
		return nil, fmt.Errorf("fsattachment: %w", err)
	}
	entries, err := os.ReadDir(filepath.Join(dir, tmpDir))
	if err != nil {
		return nil, fmt.Errorf("fsattachment: %w", err)
	}
	for _, e := range entries {
		if info, err := e.Info(); err == nil && s.now().Sub(info.ModTime()) > staleTemp {
			_ = os.Remove(filepath.Join(dir, tmpDir, e.Name()))
		}
	}
	return s, nil
}

// hashed returns the hex SHA-256 of parts, each length-prefixed so that no two lists of parts
// share an encoding.
func hashed(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// appDir returns the directory of app's owners.
func (s *Store) appDir(app string) string { return filepath.Join(s.root, "app-"+hashed("app", app)) }

// ownerDir returns the directory of owner's attachments.
func (s *Store) ownerDir(o attachment.Owner) string {
	return filepath.Join(s.appDir(o.App), hashed("owner", o.App, o.User))
}

// path checks ctx, owner and id and returns the file of owner's attachment id.
func (s *Store) path(ctx context.Context, owner attachment.Owner, id string) (string, error) {
	sum, err := attachment.CheckCall(ctx, owner, id)
	if err != nil {
		return "", err
	}
	return filepath.Join(s.ownerDir(owner), hex.EncodeToString(sum[:])), nil
}

// header is the first line of an attachment file.
type header struct {
	Size      int64  `json:"size"`
	Name      string `json:"name,omitempty"`
	MediaType string `json:"media_type,omitempty"`
}

// Put implements attachment.Store.
func (s *Store) Put(ctx context.Context, owner attachment.Owner, name, mediaType string, r io.Reader) (attachment.Ref, error) {
	if err := attachment.CheckPut(ctx, owner, name, mediaType); err != nil {
		return attachment.Ref{}, err
	}
	tmp, id, size, err := s.spool(ctx, r)
	if err != nil {
		return attachment.Ref{}, err
	}
	defer os.Remove(tmp)
	if err := writeHeader(tmp, header{Size: size, Name: name, MediaType: mediaType}); err != nil {
		return attachment.Ref{}, err
	}
	final, err := s.path(ctx, owner, id)
	if err != nil {
		return attachment.Ref{}, err
	}
	for try := 1; ; try++ {
		ref, err := s.link(tmp, final, id)
		// A DeleteUser or DeleteIdle may remove the directory or the file found between two
		// steps: place it again.
		if (errors.Is(err, fs.ErrNotExist) || errors.Is(err, attachment.ErrNotFound)) && try < maxTries {
			continue
		}
		return ref, err
	}
}

// spool writes what r yields to a temporary file, leaving room for the header in front, syncs
// it, and returns its path with the content's id and size. On error it removes the file.
func (s *Store) spool(ctx context.Context, r io.Reader) (tmp, id string, size int64, err error) {
	f, err := os.CreateTemp(filepath.Join(s.root, tmpDir), "put-*")
	if err != nil {
		return "", "", 0, fmt.Errorf("fsattachment: put: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("fsattachment: put: %w", cerr)
		}
		if err != nil {
			os.Remove(f.Name())
		}
	}()
	if _, err := f.Seek(maxHeader, io.SeekStart); err != nil {
		return "", "", 0, fmt.Errorf("fsattachment: put: %w", err)
	}
	id, size, err = attachment.ReadChunks(ctx, r, 0, s.opts.MaxSize, func(chunk []byte) error {
		if _, err := f.Write(chunk); err != nil {
			return fmt.Errorf("fsattachment: put: %w", err)
		}
		return nil
	})
	if err != nil {
		return "", "", 0, err
	}
	return f.Name(), id, size, nil
}

// writeHeader writes h's line into the room spool left in front of tmp's content, padded with
// spaces (which JSON ignores) to maxHeader bytes, and syncs tmp.
func writeHeader(tmp string, h header) error {
	var line strings.Builder
	enc := json.NewEncoder(&line)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(h); err != nil || line.Len() > maxHeader {
		return fmt.Errorf("fsattachment: put: header of %d bytes: %v", line.Len(), err) // labels are bounded: never
	}
	padded := []byte(strings.TrimSuffix(line.String(), "\n") + strings.Repeat(" ", maxHeader-line.Len()) + "\n")
	f, err := os.OpenFile(tmp, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("fsattachment: put: %w", err)
	}
	defer f.Close()
	if _, err := f.WriteAt(padded, 0); err != nil {
		return fmt.Errorf("fsattachment: put: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsattachment: put: sync: %w", err)
	}
	return nil
}

// link links tmp to final unless final exists, syncs final's directory so that the link
// survives a crash, sets final's time to now (this Put's) and returns its Ref: the first Put's
// labels, whichever Put linked it.
func (s *Store) link(tmp, final, id string) (attachment.Ref, error) {
	dir := filepath.Dir(final)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return attachment.Ref{}, fmt.Errorf("fsattachment: put: %w", err)
	}
	if err := os.Link(tmp, final); err != nil && !errors.Is(err, fs.ErrExist) {
		return attachment.Ref{}, fmt.Errorf("fsattachment: put: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return attachment.Ref{}, err
	}
	now := s.now()
	if err := os.Chtimes(final, now, now); err != nil {
		return attachment.Ref{}, fmt.Errorf("fsattachment: put %s: %w", id, err)
	}
	ref, f, err := s.open(final, id)
	if err != nil {
		return attachment.Ref{}, err
	}
	f.Close()
	return ref, nil
}

// syncDir makes the entries of dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("fsattachment: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsattachment: sync %s: %w", dir, err)
	}
	return nil
}

// open opens the attachment file at path and returns its Ref and the open file, positioned
// nowhere in particular (read it with ReadAt past the header); close it. Errors:
// attachment.ErrNotFound when there is no file, the filesystem's.
func (s *Store) open(path, id string) (attachment.Ref, *os.File, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return attachment.Ref{}, nil, fmt.Errorf("%w: attachment %s", attachment.ErrNotFound, id)
	}
	if err != nil {
		return attachment.Ref{}, nil, fmt.Errorf("fsattachment: %w", err)
	}
	line, err := bufio.NewReaderSize(io.NewSectionReader(f, 0, maxHeader), maxHeader).ReadSlice('\n')
	var h header
	if err == nil {
		err = json.Unmarshal(line, &h)
	}
	if err != nil {
		f.Close()
		return attachment.Ref{}, nil, fmt.Errorf("fsattachment: attachment %s: bad header: %w", id, err)
	}
	return attachment.Ref{ID: id, Size: h.Size, Name: h.Name, MediaType: h.MediaType}, f, nil
}

// Stat implements attachment.Store.
func (s *Store) Stat(ctx context.Context, owner attachment.Owner, id string) (attachment.Ref, error) {
	path, err := s.path(ctx, owner, id)
	if err != nil {
		return attachment.Ref{}, err
	}
	ref, f, err := s.open(path, id)
	if err != nil {
		return attachment.Ref{}, err
	}
	f.Close()
	return ref, nil
}

// Read implements attachment.Store.
func (s *Store) Read(ctx context.Context, owner attachment.Owner, id string, offset, length int64) ([]byte, error) {
	path, err := s.path(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	ref, f, err := s.open(path, id)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	end, err := attachment.CheckRange(ref.Size, offset, length)
	if err != nil {
		return nil, fmt.Errorf("attachment %s: %w", id, err)
	}
	buf := make([]byte, end-offset)
	if _, err := f.ReadAt(buf, maxHeader+offset); err != nil {
		return nil, fmt.Errorf("fsattachment: read %s: %w", id, err)
	}
	return buf, nil
}

// Delete implements attachment.Store.
func (s *Store) Delete(ctx context.Context, owner attachment.Owner, id string) error {
	path, err := s.path(ctx, owner, id)
	if err != nil {
		return err
	}
	err = os.Remove(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: attachment %s", attachment.ErrNotFound, id)
	}
	if err != nil {
		return fmt.Errorf("fsattachment: delete %s: %w", id, err)
	}
	return nil
}

// DeleteUser implements attachment.Retention.
func (s *Store) DeleteUser(ctx context.Context, app, user string) (int64, error) {
	if app == "" || user == "" {
		return 0, fmt.Errorf("%w: DeleteUser needs an app and a user", attachment.ErrInvalid)
	}
	dir := s.ownerDir(attachment.Owner{App: app, User: user})
	n, err := s.deleteIn(ctx, dir, false, func(fs.FileInfo) bool { return true })
	if err == nil {
		_ = os.Remove(dir) // fails when a Put linked a file since: that one is not deleted
	}
	return n, err
}

// DeleteIdle implements attachment.Retention.
func (s *Store) DeleteIdle(ctx context.Context, app string, before time.Time) (int64, error) {
	if app == "" {
		return 0, fmt.Errorf("%w: DeleteIdle needs an app", attachment.ErrInvalid)
	}
	owners, err := os.ReadDir(s.appDir(app))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, ctx.Err()
	}
	if err != nil {
		return 0, fmt.Errorf("fsattachment: %w", err)
	}
	var n int64
	for _, o := range owners {
		k, err := s.deleteIn(ctx, filepath.Join(s.appDir(app), o.Name()), false, func(fi fs.FileInfo) bool { return fi.ModTime().Before(before) })
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

var _ attachment.UserCounter = (*Store)(nil)

// CountUser implements attachment.UserCounter.
func (s *Store) CountUser(ctx context.Context, app, user string) (int64, error) {
	if app == "" || user == "" {
		return 0, fmt.Errorf("%w: CountUser needs an app and a user", attachment.ErrInvalid)
	}
	return s.deleteIn(ctx, s.ownerDir(attachment.Owner{App: app, User: user}), true, func(fs.FileInfo) bool { return true })
}

// deleteIn deletes the attachment files in dir that match selects and returns how many it
// deleted; a dry run counts them only.
func (s *Store) deleteIn(ctx context.Context, dir string, dryRun bool, match func(fs.FileInfo) bool) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("fsattachment: %w", err)
	}
	var n int64
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) || err == nil && (!info.Mode().IsRegular() || !match(info)) {
			continue
		}
		if err == nil && !dryRun {
			err = os.Remove(filepath.Join(dir, e.Name()))
		}
		switch {
		case err == nil:
			n++
		case !errors.Is(err, fs.ErrNotExist):
			return n, fmt.Errorf("fsattachment: delete: %w", err)
		}
	}
	return n, nil
}
