package rdma

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

func TestBackings(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "region")
	require.NoError(t, os.WriteFile(file, []byte("old contents, to be discarded"), 0o600))
	shm := fmt.Sprintf("farmem-test-%d", os.Getpid())
	for _, spec := range []string{"", "anon", "file:" + file, "shm:" + shm} {
		s, err := NewServer(ServerOptions{Node: 1, Size: 1 << 20, Backing: spec, Secret: testSecret, Logger: testLogger()})
		if spec == "shm:"+shm && err != nil {
			if _, serr := os.Stat("/dev/shm"); serr != nil {
				t.Logf("no /dev/shm here: %v", err)
				continue
			}
		}
		require.NoError(t, err, spec)
		mem := s.s.reg.mem
		buf := make([]byte, 64)
		mem.ReadAt(buf, 0, nil)
		require.Equal(t, make([]byte, 64), buf, "%s: the node serves zeroed memory", spec)
		mem.WriteAt([]byte("far"), 1<<20-8, nil)
		require.NoError(t, s.Close(), spec)
		require.NoError(t, s.Close(), "Close is idempotent")
	}
	_, err := os.Stat(filepath.Join("/dev/shm", shm))
	require.True(t, os.IsNotExist(err), "a shm backing is removed on Close")
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Equal(t, "far", string(b[1<<20-8:1<<20-5]), "a file backing keeps what was written")

	for _, spec := range []string{"tape", "shm:", "shm:a/b", "file:", "anon:x", "devdax:"} {
		_, err := NewServer(ServerOptions{Node: 1, Size: 1 << 20, Backing: spec, Secret: testSecret})
		require.ErrorIs(t, err, farmem.ErrInvalid, spec)
	}
	_, err = NewServer(ServerOptions{Node: 1, Size: 1 << 20, Backing: "devdax:/dev/dax-that-is-not-here", Secret: testSecret})
	require.ErrorIs(t, err, farmem.ErrNotSupported, "no device DAX on this machine")
	_, err = NewServer(ServerOptions{Node: 1, Size: 1 << 20, Backing: "devdax:" + file, Secret: testSecret})
	require.ErrorIs(t, err, farmem.ErrInvalid, "a regular file is no DAX device")
	for _, o := range []ServerOptions{
		{Node: 0, Size: 1 << 20, Secret: testSecret},
		{Node: farmem.MaxMemoryNode + 1, Size: 1 << 20, Secret: testSecret},
		{Node: 1, Size: 0, Secret: testSecret},
		{Node: 1, Size: 1 << 20, Secret: []byte("short")},
		{Node: 1, Size: 1 << 20, Secret: testSecret, Provider: "carrier-pigeon"},
	} {
		_, err := NewServer(o)
		require.Error(t, err, "%+v", o)
	}
}
