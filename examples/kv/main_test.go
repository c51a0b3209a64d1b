package main

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The program creates the region and the key on its first run and finds both on the next.
func TestKV(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.region")
	for range 2 {
		v, err := run(context.Background(), path)
		require.NoError(t, err)
		require.Equal(t, "hello", string(v))
	}
}
