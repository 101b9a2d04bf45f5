package record

import (
	"strconv"

	"github.com/google/uuid"
)

// gapNamespace is the namespace of GapRequestID's name-based UUIDs, so that they never collide
// with the other UUIDs turnstile derives.
var gapNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/turnstile-go/turnstile/gap"))

// GapRequestID returns the identity of the gap dead letter (OriginGap) of sequence of the
// conversation workflow workflowID: a version 5 UUID (RFC 9562 section 5.5) of
// "WORKFLOW_ID/SEQUENCE" in its 36-character text form, carried in HeaderRequestID. A gap has
// no request, so no request id of its own; this one is the same on every attempt of the
// activity that reports the gap, so that a reader dedups the copies a retry publishes by their
// request-id header, as it dedups any dead letter. A real request's id is the producer's
// (random, version 4 or 7), so it does not meet these. A sequence's decimal text has no "/",
// so no two pairs give the same name.
func GapRequestID(workflowID string, sequence int64) string {
	name := strconv.AppendInt(append([]byte(workflowID), '/'), sequence, 10)
	return uuid.NewSHA1(gapNamespace, name).String()
}
