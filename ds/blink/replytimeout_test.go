package blink_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/farmem/farmem/ds/selcc"
	"github.com/farmem/farmem/farmem/local"
)

// TestLinearizableShortReplyTimeout: the local lincheck under WriteBack with the reply timeout
// cut to 1 and 4 ms, so that under load a requester often gives up on a holder that is alive
// and only late, which then hands its dirty line (possibly a freshly split node, held nowhere
// else) into the requester's quarantined frame. The operation that gave up has an unknown
// outcome and the client goes on; no acknowledged write may be lost: the history stays
// linearizable and every node stays readable (a dropped line reads as a corrupt node). Some
// 100 operations give up at 1 ms and some 40 at 4 ms; either run alone fails when a landed
// dirty line is released without its write-back.
func TestLinearizableShortReplyTimeout(t *testing.T) {
	for _, rt := range []time.Duration{time.Millisecond, 4 * time.Millisecond} {
		t.Run(fmt.Sprint(rt), func(t *testing.T) {
			r := localRig(t, local.Options{Shape: local.Shape{MemoryNodes: 2, ComputeNodes: 2}, Tearing: true, Jitter: 5 * time.Microsecond},
				selcc.Options{LineSize: 256, Frames: 24, Durability: selcc.WriteBack, ReplyTimeout: rt})
			w := splitLoad
			w.goOnDown = true
			lincheckRun(t, r, 6, w)
		})
	}
}
