//go:build linux

package cxl_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/farmem/farmem/atomics"
	"github.com/farmem/farmem/cxl"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
	"github.com/farmem/farmem/numaemu"
)

// small is a region small enough that tests create many quickly.
var small = cxl.Options{
	Shape:       transport.Shape{MemoryNodes: 2, MemorySize: 256 << 10, ComputeNodes: 3, SliceSize: 4 << 10, SharedSize: 16 << 10},
	DownTimeout: testDownTimeout,
}

// shmDir is a fresh directory on /dev/shm.
func shmDir(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	d, err := os.MkdirTemp("/dev/shm", "cxltest")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

func attach(t *testing.T, r *cxl.Region, o cxl.OpenOptions) (*cxl.Fabric, farmem.Memory) {
	t.Helper()
	f, err := r.Attach(o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	m, err := f.Open(context.Background(), f.ID())
	require.NoError(t, err)
	return f, m
}

func TestShmFileCreateOpen(t *testing.T) {
	path := filepath.Join(shmDir(t), "region")
	r, err := cxl.Create(path, small)
	require.NoError(t, err)
	defer r.Close()
	info := r.Info()
	require.Equal(t, cxl.BackingFile, info.Backing)
	require.Equal(t, path, r.Path())
	require.Equal(t, 2, info.MemoryNodes)
	t.Logf("placement: %s (%v)", info.Placement.Reason, info.Placement.Verified)
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file is left behind")
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, fs.FileMode(0o600), fi.Mode().Perm())
	require.Equal(t, int64(info.Size), fi.Size())

	_, err = cxl.Create(path, small)
	require.ErrorIs(t, err, fs.ErrExist, "Create does not overwrite")

	ctx := context.Background()
	f1, err := cxl.Open(path, cxl.OpenOptions{})
	require.NoError(t, err)
	defer f1.Close()
	f2, err := cxl.Open(path, cxl.OpenOptions{Policy: cxl.Uncached})
	require.NoError(t, err)
	defer f2.Close()
	require.NotEqual(t, f1.ID(), f2.ID())
	m1, err := f1.Open(ctx, f1.ID())
	require.NoError(t, err)
	m2, err := f2.Open(ctx, f2.ID())
	require.NoError(t, err)
	a := farmem.MakeAddr(2, 64<<10)
	require.NoError(t, m1.Write(ctx, a, []byte("through the file")))
	got := make([]byte, 16)
	require.NoError(t, m2.Read(ctx, a, got))
	require.Equal(t, "through the file", string(got))

	// A second process's view: the file's bytes at the memory node's offset.
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.True(t, bytes.Contains(raw, []byte("through the file")))
}

// Every way a file can fail to be a region gives an error, and none writes to the file.
func TestOpenBadRegions(t *testing.T) {
	dir := shmDir(t)
	good := filepath.Join(dir, "good")
	r, err := cxl.Create(good, small)
	require.NoError(t, err)
	size := r.Info().Size
	require.NoError(t, r.Close())
	valid, err := os.ReadFile(good)
	require.NoError(t, err)

	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, b, 0o600))
		return p
	}
	flip := func(off int) []byte {
		b := bytes.Clone(valid)
		b[off] ^= 0xff
		return b
	}
	cases := []struct {
		name, path string
		want       error
	}{
		{"wrong magic", write("magic", flip(0)), cxl.ErrBadRegion},
		{"wrong version", write("version", flip(8)), cxl.ErrBadRegion},
		{"wrong size field", write("sizefield", flip(33)), cxl.ErrBadRegion},
		{"bad checksum", write("crc", flip(210)), cxl.ErrBadRegion},
		{"truncated", write("truncated", valid[:size/2]), cxl.ErrBadRegion},
		{"too small", write("small", valid[:100]), cxl.ErrBadRegion},
		{"empty", write("empty", nil), cxl.ErrBadRegion},
		{"text", write("text", []byte(strings.Repeat("not a region\n", 1000))), cxl.ErrBadRegion},
		{"directory", dir, cxl.ErrBadRegion},
		{"missing", filepath.Join(dir, "missing"), fs.ErrNotExist},
		{"character device", "/dev/null", cxl.ErrBadRegion},
		// A file that cannot be read: reading page 0 of this process's memory fails with EIO.
		{"unreadable", "/proc/self/mem", unix.EIO},
	}
	for _, tc := range cases {
		var before []byte
		var mtime time.Time
		if fi, err := os.Stat(tc.path); err == nil && fi.Mode().IsRegular() {
			if before, err = os.ReadFile(tc.path); err != nil {
				before = nil // unreadable to the test too
			}
			mtime = fi.ModTime()
		}
		_, err := cxl.OpenRegion(tc.path)
		require.ErrorIs(t, err, tc.want, tc.name)
		t.Logf("%s: %v", tc.name, err)
		_, err = cxl.Open(tc.path, cxl.OpenOptions{})
		require.ErrorIs(t, err, tc.want, tc.name)
		if before != nil {
			after, err := os.ReadFile(tc.path)
			require.NoError(t, err)
			require.Equal(t, before, after, "%s: the file was written", tc.name)
			fi, err := os.Stat(tc.path)
			require.NoError(t, err)
			require.Equal(t, mtime, fi.ModTime(), tc.name)
		}
	}

	// A file without read permission (root reads it anyway).
	if os.Getuid() != 0 {
		noperm := write("noperm", valid)
		require.NoError(t, os.Chmod(noperm, 0))
		_, err := cxl.OpenRegion(noperm)
		require.ErrorIs(t, err, fs.ErrPermission)
	}
}

// A /dev/shm file truncated by another process faults inside the verbs that touch the lost
// pages: they return errors, and this process lives on.
func TestTruncatedFileFaultsInsideVerbs(t *testing.T) {
	path := filepath.Join(shmDir(t), "region")
	r, err := cxl.Create(path, small)
	require.NoError(t, err)
	defer r.Close()
	f, m := attach(t, r, cxl.OpenOptions{})
	fb, mb := attach(t, r, cxl.OpenOptions{})
	require.NoError(t, fb.Handle(fb.ID(), 1, func(context.Context, farmem.Memory, farmem.ClientID, []byte) ([]byte, error) {
		return nil, nil
	}))
	ctx := context.Background()
	waited := make(chan error, 1)
	go func() {
		_, err := mb.Wait(ctx, mb.Info().Slice, func(v uint64) bool { return v == 42 })
		waited <- err
	}()
	last := farmem.MakeAddr(2, 128<<10)
	require.NoError(t, m.Write(ctx, last, []byte("before")))

	// Another process (here: another descriptor) cuts the file down to its first memory node.
	info := r.Info()
	require.NoError(t, os.Truncate(path, int64(info.Size-info.MemorySize)))

	require.ErrorIs(t, m.Read(ctx, last, make([]byte, 8)), atomics.ErrFault)
	err = m.Write(ctx, last, []byte("after"))
	require.ErrorIs(t, err, farmem.ErrNodeDown)
	require.ErrorIs(t, err, atomics.ErrFault)
	_, err = m.FAA(ctx, last, 1)
	require.ErrorIs(t, err, atomics.ErrFault)
	var b farmem.Batch
	b.Read(last, make([]byte, 64))
	b.Read(farmem.MakeAddr(1, 64<<10), make([]byte, 64))
	require.ErrorIs(t, m.Do(ctx, &b), atomics.ErrFault)
	_, err = b.Result(1)
	require.NoError(t, err, "the first memory node is still there")

	// Cut everything: the compute-id table, the nodes' regions and control blocks. Verbs to a
	// peer's region, Calls and the pending Wait fail; the nodes' own renewers and dispatchers
	// fault and crash their nodes; nothing takes the process down.
	require.NoError(t, os.Truncate(path, 0))
	require.Error(t, m.Read(ctx, mb.Info().Slice, make([]byte, 8)))
	_, err = m.Call(ctx, fb.ID(), 1, nil)
	require.ErrorIs(t, err, farmem.ErrNodeDown)
	select {
	case err := <-waited:
		require.ErrorIs(t, err, farmem.ErrNodeDown)
	case <-time.After(4*testDownTimeout + 10*time.Second):
		t.Fatal("a Wait on a vanished region did not end")
	}
	require.Eventually(t, func() bool {
		_, err := m.FAA(ctx, farmem.MakeAddr(1, 64<<10), 1)
		return errors.Is(err, farmem.ErrNodeDown)
	}, 5*time.Second, 5*time.Millisecond)
	_, err = r.Status()
	require.ErrorIs(t, err, atomics.ErrFault)
	require.NoError(t, f.Close())
	require.NoError(t, fb.Close())
}

// A memfd is sealed against shrinking: no process can truncate it under the others.
func TestMemfdSealed(t *testing.T) {
	r, err := cxl.Create("", small)
	require.NoError(t, err)
	defer r.Close()
	require.Equal(t, cxl.BackingMemfd, r.Info().Backing)
	require.True(t, strings.HasPrefix(r.Path(), fmt.Sprintf("/proc/%d/fd/", os.Getpid())), r.Path())
	err = os.Truncate(r.Path(), 4096)
	require.ErrorIs(t, err, unix.EPERM)
	fd, err := os.OpenFile(r.Path(), os.O_RDWR, 0)
	require.NoError(t, err)
	defer fd.Close()
	seals, err := unix.FcntlInt(fd.Fd(), unix.F_GET_SEALS, 0)
	require.NoError(t, err)
	require.NotZero(t, seals&unix.F_SEAL_SHRINK)
	// Opening it by its /proc path shares this process's mapping.
	f, err := cxl.Open(r.Path(), cxl.OpenOptions{})
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

func TestFSDAXRefusedWithoutDAX(t *testing.T) {
	dir := shmDir(t)
	path := filepath.Join(dir, "region")
	_, err := cxl.Create(path, cxl.Options{Shape: cxl.Shape{MemorySize: 1 << 20}, Backing: cxl.BackingFSDAX})
	require.ErrorIs(t, err, cxl.ErrNotDAX)
	require.ErrorIs(t, err, farmem.ErrNotSupported)
	require.ErrorContains(t, err, "MAP_SYNC")
	t.Logf("%v", err)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "nothing is left behind")
}

func TestDevDAX(t *testing.T) {
	_, err := cxl.Create("/dev/null", cxl.Options{Backing: cxl.BackingDevDAX})
	require.ErrorIs(t, err, cxl.ErrNotDAX, "a character device that is not DAX")
	_, err = cxl.Create(filepath.Join(shmDir(t), "f"), cxl.Options{Backing: cxl.BackingDevDAX})
	require.ErrorIs(t, err, cxl.ErrNotDAX, "a file")
	devs, _ := filepath.Glob("/dev/dax*")
	if len(devs) == 0 {
		t.Skip("no device-DAX instance on this machine (/dev/dax*): only the refusals are tested")
	}
	if os.Getenv("CXL_TEST_DEVDAX") != devs[0] {
		t.Skipf("formatting %s would destroy its contents; set CXL_TEST_DEVDAX=%s to allow it", devs[0], devs[0])
	}
	r, err := cxl.Create(devs[0], cxl.Options{Shape: cxl.Shape{MemoryNodes: 1, MemorySize: 1 << 20}})
	require.NoError(t, err)
	defer r.Close()
	require.Equal(t, cxl.BackingDevDAX, r.Info().Backing)
	_, m := attach(t, r, cxl.OpenOptions{})
	_, err = m.FAA(context.Background(), farmem.MakeAddr(1, 64<<10), 1)
	require.NoError(t, err)
}

// freeHugePages returns HugePages_Free and a hugetlbfs mount point, if any.
func freeHugePages() (free int, mount string) {
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for l := range strings.SplitSeq(string(b), "\n") {
			if rest, ok := strings.CutPrefix(l, "HugePages_Free:"); ok {
				free, _ = strconv.Atoi(strings.TrimSpace(rest))
			}
		}
	}
	if fd, err := os.Open("/proc/mounts"); err == nil {
		defer fd.Close()
		sc := bufio.NewScanner(fd)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) > 2 && f[2] == "hugetlbfs" {
				mount = f[1]
				break
			}
		}
	}
	return free, mount
}

func TestHugetlbfs(t *testing.T) {
	free, mount := freeHugePages()
	o := cxl.Options{
		Shape:       transport.Shape{MemoryNodes: 1, MemorySize: 1 << 20, ComputeNodes: 2, SliceSize: 4 << 10, SharedSize: 16 << 10},
		Backing:     cxl.BackingHugetlb,
		Mailboxes:   4,
		DownTimeout: testDownTimeout,
	}
	_, err := cxl.Create(filepath.Join(shmDir(t), "f"), o)
	require.ErrorIs(t, err, farmem.ErrNotSupported, "tmpfs is not hugetlbfs")
	if free < 8 {
		t.Skipf("%d free huge pages (need 8; echo 16 > /proc/sys/vm/nr_hugepages)", free)
	}
	paths := []string{""} // a hugetlb memfd
	if mount != "" {
		paths = append(paths, filepath.Join(mount, fmt.Sprintf("cxltest-%d", rand.Uint64())))
	}
	for _, path := range paths {
		r, err := cxl.Create(path, o)
		require.NoError(t, err, path)
		if path != "" {
			t.Cleanup(func() { _ = os.Remove(path) })
		}
		info := r.Info()
		require.Equal(t, cxl.BackingHugetlb, info.Backing)
		require.Greater(t, info.PageSize, uint64(4096))
		require.Zero(t, info.Size%info.PageSize)
		_, m := attach(t, r, cxl.OpenOptions{})
		_, err = m.FAA(context.Background(), farmem.MakeAddr(1, 64<<10), 1)
		require.NoError(t, err)
		t.Logf("%q: %d-byte pages, %d bytes, %s", path, info.PageSize, info.Size, info.Placement.Reason)
		require.NoError(t, r.Close())
	}
}

func TestPlacement(t *testing.T) {
	topo, err := numaemu.ReadTopology()
	if err != nil {
		t.Skipf("no NUMA topology: %v", err)
	}
	local := topo.MemoryNodes()[0]
	o := small
	o.Placement = &numaemu.Request{Node: local}
	r, err := cxl.Create("", o)
	require.NoError(t, err)
	defer r.Close()
	pl := r.Info().Placement
	t.Logf("%s; %v", pl.Reason, pl.Verified)
	if pl.Node >= 0 {
		require.Equal(t, local, pl.Node)
		require.False(t, pl.Emulated)
		require.True(t, pl.Verified.On(local), "every page verified on node %d", local)
		require.Equal(t, int(r.Info().Size/4096), pl.Verified.Pages)
	}
	f, _ := attach(t, r, cxl.OpenOptions{})
	require.Zero(t, f.Inject(), "real memory on the requested node: nothing injected")

	absent := 1
	for slices := topo.MemoryNodes(); contains(slices, absent); absent++ {
	}
	o.Placement = &numaemu.Request{Node: absent, Profile: numaemu.CXLDirect}
	_, err = cxl.Create("", o)
	require.ErrorIs(t, err, numaemu.ErrNoNode, "an absent node without fallback")

	o.Placement = &numaemu.Request{Node: absent, Profile: numaemu.CXLDirect, Fallback: true}
	r2, err := cxl.Create("", o)
	require.NoError(t, err)
	defer r2.Close()
	pl = r2.Info().Placement
	require.True(t, pl.Emulated)
	require.Equal(t, numaemu.CXLDirect.Added(), pl.Inject)
	f2, _ := attach(t, r2, cxl.OpenOptions{})
	require.Equal(t, numaemu.CXLDirect.Added(), f2.Inject(), "the fallback's profile is injected")
	// Another opener learns it from the header.
	r3, err := cxl.OpenRegion(r2.Path())
	require.NoError(t, err)
	defer r3.Close()
	require.Equal(t, "cxl-direct", r3.Info().Placement.Profile)
	none := numaemu.LocalDRAM
	f3, _ := attach(t, r3, cxl.OpenOptions{Profile: &none})
	require.Zero(t, f3.Inject(), "an explicit profile overrides the region's")
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestComputeIDs(t *testing.T) {
	r, err := cxl.Create("", small)
	require.NoError(t, err)
	defer r.Close()
	tp := r.Topology()
	require.Len(t, tp.MemoryNodes(), 2)
	require.Len(t, tp.ComputeNodes(), 3, "every compute id is in the topology")
	fs := make([]*cxl.Fabric, 3)
	for i := range fs {
		fs[i], err = r.Attach(cxl.OpenOptions{})
		require.NoError(t, err)
		require.Equal(t, farmem.ComputeID(i+1), fs[i].ID().ComputeID(), "dense ids, lowest first")
	}
	_, err = r.Attach(cxl.OpenOptions{})
	require.ErrorIs(t, err, farmem.ErrNoSpace)

	st, err := r.Status()
	require.NoError(t, err)
	for _, c := range st.Compute {
		require.True(t, c.Live, "c%d", c.ID)
		require.Equal(t, os.Getpid(), c.PID)
	}
	// Close frees an id; a crash leaves it crashed; both are reclaimed, lowest first.
	require.NoError(t, fs[1].Close())
	require.NoError(t, fs[0].Crash(fs[0].ID()))
	st, err = r.Status()
	require.NoError(t, err)
	require.True(t, st.Compute[0].Crashed)
	require.True(t, st.Compute[1].Free)
	_, err = fs[2].Open(context.Background(), fs[0].ID())
	require.ErrorIs(t, err, farmem.ErrInvalid, "a node this fabric does not host")
	_, err = fs[0].Open(context.Background(), fs[0].ID())
	require.ErrorIs(t, err, farmem.ErrNodeDown)
	a, err := r.Attach(cxl.OpenOptions{})
	require.NoError(t, err)
	require.Equal(t, farmem.ComputeID(1), a.ID().ComputeID())
	b, err := r.Attach(cxl.OpenOptions{})
	require.NoError(t, err)
	require.Equal(t, farmem.ComputeID(2), b.ID().ComputeID())
	for _, f := range []*cxl.Fabric{fs[0], fs[2], a, b} {
		require.NoError(t, f.Close())
		require.NoError(t, f.Close())
	}
	st, err = r.Status()
	require.NoError(t, err)
	for _, c := range st.Compute {
		require.False(t, c.Live, "c%d", c.ID)
	}
}

// Calls longer than a mailbox go through in chunks, both ways.
func TestCallChunked(t *testing.T) {
	o := small
	o.MailboxSize = 4 << 10
	r, err := cxl.Create("", o)
	require.NoError(t, err)
	defer r.Close()
	for _, policy := range []cxl.Policy{cxl.Coherent, cxl.Uncached} {
		fa, ma := attach(t, r, cxl.OpenOptions{Policy: policy})
		fb, _ := attach(t, r, cxl.OpenOptions{Policy: policy})
		require.NoError(t, fb.Handle(fb.ID(), 1, func(_ context.Context, _ farmem.Memory, _ farmem.ClientID, req []byte) ([]byte, error) {
			sum := sha256.Sum256(req)
			out := bytes.Clone(req)
			for i := range out {
				out[i] ^= sum[i%len(sum)]
			}
			return out, nil
		}))
		require.NoError(t, fb.Handle(fb.ID(), 2, func(context.Context, farmem.Memory, farmem.ClientID, []byte) ([]byte, error) {
			return make([]byte, farmem.MaxCallBytes+1), nil
		}))
		ctx := context.Background()
		for _, n := range []int{0, 1, 4096, 4097, 3*4096 + 5, farmem.MaxCallBytes} {
			req := make([]byte, n)
			for i := range req {
				req[i] = byte(rand.Uint32())
			}
			reply, err := ma.Call(ctx, fb.ID(), 1, req)
			require.NoError(t, err, "%d bytes", n)
			sum := sha256.Sum256(req)
			require.Len(t, reply, n)
			for i := range reply {
				if reply[i] != req[i]^sum[i%len(sum)] {
					t.Fatalf("%v: %d-byte call: reply byte %d wrong", policy, n, i)
				}
			}
		}
		_, err = ma.Call(ctx, fb.ID(), 1, make([]byte, farmem.MaxCallBytes+1))
		require.ErrorIs(t, err, farmem.ErrInvalid)
		_, err = ma.Call(ctx, fb.ID(), 2, nil)
		require.ErrorIs(t, err, farmem.ErrInvalid, "a reply over the limit")
		st, err := r.Status()
		require.NoError(t, err)
		require.Empty(t, st.Compute[fb.ID().ComputeID()-1].Mailboxes, "every mailbox is free again")
		require.NoError(t, fa.Close())
		require.NoError(t, fb.Close())
	}
}

// A caller that gives up (its context ends) while the handler runs leaves its mailbox flagged;
// the target frees it when the handler returns. A target that crashes under a call fails it
// with ErrNodeDown at once.
func TestCallAbandonAndCrash(t *testing.T) {
	r, err := cxl.Create("", small)
	require.NoError(t, err)
	defer r.Close()
	_, ma := attach(t, r, cxl.OpenOptions{})
	fb, _ := attach(t, r, cxl.OpenOptions{})
	entered := make(chan struct{}, 1)
	releases := []chan struct{}{make(chan struct{}), make(chan struct{})}
	for method, release := range releases {
		require.NoError(t, fb.Handle(fb.ID(), uint16(method), func(ctx context.Context, _ farmem.Memory, _ farmem.ClientID, _ []byte) ([]byte, error) {
			entered <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return []byte("late"), nil
		}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err = ma.Call(ctx, fb.ID(), 0, nil)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	<-entered
	held := mailboxesOf(t, r, fb.ID().ComputeID(), ma.Info().Node.ComputeID())
	require.Len(t, held, 1)
	require.True(t, held[0].Abandoned)
	close(releases[0])
	require.Eventually(t, func() bool { return len(mailboxesOf(t, r, fb.ID().ComputeID(), ma.Info().Node.ComputeID())) == 0 },
		time.Second, time.Millisecond, "the target frees an abandoned mailbox")

	// Crash the target under a call.
	done := make(chan error, 1)
	go func() {
		_, err := ma.Call(context.Background(), fb.ID(), 1, nil)
		done <- err
	}()
	<-entered
	start := time.Now()
	require.NoError(t, fb.Crash(fb.ID()))
	err = <-done
	require.ErrorIs(t, err, farmem.ErrNodeDown)
	require.Less(t, time.Since(start), testDownTimeout)
	close(releases[1])
}

// More callers than mailboxes: the rest wait for one to be freed, and all complete.
func TestCallMailboxesExhausted(t *testing.T) {
	o := small
	o.Mailboxes = 2
	o.MaxHandlers = 2
	r, err := cxl.Create("", o)
	require.NoError(t, err)
	defer r.Close()
	fa, _ := attach(t, r, cxl.OpenOptions{})
	fb, _ := attach(t, r, cxl.OpenOptions{})
	require.NoError(t, fb.Handle(fb.ID(), 1, func(context.Context, farmem.Memory, farmem.ClientID, []byte) ([]byte, error) {
		time.Sleep(time.Millisecond)
		return []byte("ok"), nil
	}))
	const callers = 12
	errs := make(chan error, callers)
	for range callers {
		m, err := fa.Open(context.Background(), fa.ID())
		require.NoError(t, err)
		go func() {
			var err error
			for range 5 {
				if _, err = m.Call(context.Background(), fb.ID(), 1, nil); err != nil {
					break
				}
			}
			errs <- err
		}()
	}
	for range callers {
		require.NoError(t, <-errs)
	}
}

func TestHostedOnlyFaults(t *testing.T) {
	r, err := cxl.Create("", small)
	require.NoError(t, err)
	defer r.Close()
	f, _ := attach(t, r, cxl.OpenOptions{})
	other := farmem.ComputeID(3).Node() // not attached by this process
	require.ErrorIs(t, f.Crash(other), farmem.ErrNotSupported)
	require.ErrorIs(t, f.CrashAfter(other, 1), farmem.ErrNotSupported)
	require.ErrorIs(t, f.CrashClient(999), farmem.ErrNotSupported)
	require.ErrorIs(t, f.Partition(999, 1), farmem.ErrNotSupported)
	require.ErrorIs(t, f.Crash(farmem.MaxMemoryNode), farmem.ErrInvalid)
}

// Hang makes a compute node of this process fail-silent: calls and verbs to it fail with
// ErrNodeDown after the down timeout; Resume brings it back.
func TestHangComputeNode(t *testing.T) {
	t.Parallel() // its own region; mostly waiting out two down timeouts, which its bounds tolerate
	r, err := cxl.Create("", small)
	require.NoError(t, err)
	defer r.Close()
	fa, ma := attach(t, r, cxl.OpenOptions{})
	fb, mb := attach(t, r, cxl.OpenOptions{})
	require.NoError(t, fb.Handle(fb.ID(), 1, func(context.Context, farmem.Memory, farmem.ClientID, []byte) ([]byte, error) {
		return []byte("pong"), nil
	}))
	ctx := context.Background()
	require.NoError(t, fa.Hang(fb.ID()))
	start := time.Now()
	_, err = ma.Call(ctx, fb.ID(), 1, nil)
	require.ErrorIs(t, err, farmem.ErrNodeDown)
	require.ErrorIs(t, ma.Read(ctx, mb.Info().Slice, make([]byte, 8)), farmem.ErrNodeDown)
	took := time.Since(start)
	require.GreaterOrEqual(t, took, testDownTimeout, "silent, not refused")
	require.Less(t, took, 3*testDownTimeout+5*time.Second)
	require.NoError(t, fa.Resume(fb.ID()))
	require.Eventually(t, func() bool {
		reply, err := ma.Call(ctx, fb.ID(), 1, nil)
		return err == nil && string(reply) == "pong"
	}, 2*time.Second, 10*time.Millisecond, "a resumed node serves again")
}

// Closing every handle stops every goroutine the package started.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	r, err := cxl.Create("", small)
	require.NoError(t, err)
	fa, err := r.Attach(cxl.OpenOptions{})
	require.NoError(t, err)
	fb, err := r.Attach(cxl.OpenOptions{})
	require.NoError(t, err)
	require.NoError(t, fb.Handle(fb.ID(), 1, func(context.Context, farmem.Memory, farmem.ClientID, []byte) ([]byte, error) {
		return nil, nil
	}))
	ctx := context.Background()
	ma, err := fa.Open(ctx, fa.ID())
	require.NoError(t, err)
	for range 10 {
		_, err = ma.Call(ctx, fb.ID(), 1, nil)
		require.NoError(t, err)
	}
	require.NoError(t, fa.Hang(1)) // a fault: batches go through queues
	var b farmem.Batch
	b.FAA(farmem.MakeAddr(2, 64<<10), 1)
	require.NoError(t, ma.Do(ctx, &b))
	require.NoError(t, fa.Resume(1))
	require.NoError(t, fa.Close())
	require.NoError(t, fb.Close())
	require.NoError(t, r.Close())
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		var sb strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&sb, 1)
		t.Fatalf("%d goroutines left, %d before:\n%s", n, before, sb.String())
	}
}

func TestCreateTemp(t *testing.T) {
	dir := shmDir(t)
	r, err := cxl.CreateTemp(dir, "bench-*.cxl", small)
	require.NoError(t, err)
	path := r.Path()
	require.True(t, strings.HasPrefix(filepath.Base(path), "bench-") && strings.HasSuffix(path, ".cxl"), path)
	f, err := cxl.Open(path, cxl.OpenOptions{}) // as another process would
	require.NoError(t, err)
	require.NoError(t, r.Close())
	_, err = os.Stat(path)
	require.ErrorIs(t, err, fs.ErrNotExist, "the creator's Close removes the name")
	m, err := f.Open(context.Background(), f.ID())
	require.NoError(t, err)
	_, err = m.FAA(context.Background(), farmem.MakeAddr(1, 64<<10), 1)
	require.NoError(t, err, "an attached fabric keeps the memory")
	require.NoError(t, f.Close())

	r, err = cxl.CreateTemp("", "", small)
	require.NoError(t, err)
	t.Logf("default directory: %s", filepath.Dir(r.Path()))
	require.NoError(t, r.Close())
	_, err = cxl.CreateTemp(dir, "a/b*", small)
	require.ErrorIs(t, err, farmem.ErrInvalid)
}
