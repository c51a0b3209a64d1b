package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestVisits runs the guide's program over cxl and over in-process tcp memory nodes: the same
// run, only the fabric differs. run itself checks that the counter, the histogram, the map and
// the queue agree.
func TestVisits(t *testing.T) {
	for _, name := range []string{"cxl", "tcp"} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			f, closeFabric, err := open(ctx, name)
			require.NoError(t, err)
			defer closeFabric()
			r, err := run(ctx, f, 4, 150)
			require.NoError(t, err)
			require.Equal(t, uint64(600), r.Requests)
			require.NotZero(t, r.Slow, "the latency pattern has slow requests")
			require.Equal(t, r.Slow, r.Events)
			require.Len(t, r.Pages, pageCount)
			t.Logf("%s: %s", name, r)
		})
	}
}
