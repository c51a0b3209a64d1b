//go:build linux

package rdma

import (
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseSpin(t *testing.T) {
	for in, want := range map[string]time.Duration{"off": 0, "0": 0, "50us": 50 * time.Microsecond, "1ms": time.Millisecond} {
		d, err := parseSpin(in)
		require.NoError(t, err, in)
		require.Equal(t, want, d, in)
	}
	for _, in := range []string{"-1us", "fast", "50"} {
		_, err := parseSpin(in)
		require.Error(t, err, in)
	}
}

// socketPair returns two connected non-blocking stream sockets.
func socketPair(t *testing.T) (a, b int) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Close(fds[0]); _ = syscall.Close(fds[1]) })
	return fds[0], fds[1]
}

// allowed returns a governor whose readers may spin for limit, whatever their yields take.
func allowed(limit time.Duration) *spinGov {
	g := &spinGov{yieldMax: int64(time.Hour)}
	g.limit.Store(int64(limit))
	return g
}

// TestSpinReadDelivers: a spinning read returns bytes that arrive while it spins.
func TestSpinReadDelivers(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	a, b := socketPair(t)
	g := allowed(time.Minute)
	go func() {
		time.Sleep(time.Millisecond)
		_, _ = syscall.Write(b, []byte("answer"))
	}()
	buf := make([]byte, 16)
	n, err := g.read(a, buf, false)
	require.NoError(t, err)
	require.Equal(t, "answer", string(buf[:n]))
	require.False(t, g.spinning.Load())
	spins, answered := g.spins.Load(), g.answered.Load()
	require.Equal(t, [2]int64{1, 1}, [2]int64{spins, answered})
}

// TestSpinReadBounded: a spin ends at its limit with EAGAIN when nothing comes, and no read
// spins when the limit is 0, when another reader spins, with GOMAXPROCS 1, or in the back-off
// after a miss, which doubles with each miss in a row and ends with an answered spin.
func TestSpinReadBounded(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	a, b := socketPair(t)
	buf := make([]byte, 16)

	g := allowed(20 * time.Millisecond)
	start := time.Now()
	_, err := g.read(a, buf, false)
	require.ErrorIs(t, err, syscall.EAGAIN)
	require.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond, "it spun for its limit")
	require.False(t, g.spinning.Load())
	require.Equal(t, [2]int64{1, 0}, [2]int64{g.spins.Load(), g.answered.Load()})

	// The refusals return at once: with a limit of 10 s, anything but at once is a spin.
	refused := func(g *spinGov) {
		t.Helper()
		start := time.Now()
		spins := g.spins.Load()
		_, err := g.read(a, buf, false)
		require.ErrorIs(t, err, syscall.EAGAIN)
		require.Less(t, time.Since(start), 5*time.Second)
		require.Equal(t, spins, g.spins.Load(), "no spin")
	}
	refused(allowed(0))
	busy := allowed(10 * time.Second)
	busy.spinning.Store(true)
	refused(busy)
	one := allowed(10 * time.Second)
	runtime.GOMAXPROCS(1)
	refused(one)
	runtime.GOMAXPROCS(2)
	// GOMAXPROCS is looked at again only procsEvery later; procs 0 has it looked at now.
	refused(one)
	one.procs.Store(0)
	_, err = syncWrite(b, "x")
	require.NoError(t, err)
	n, err := one.read(a, buf, false)
	require.NoError(t, err)
	require.Equal(t, 1, n, "with GOMAXPROCS 2 it reads (spinning if need be)")

	// Back-off: the first miss skips the next wait, the second in a row the next two, then
	// four; an answered spin ends it.
	g = allowed(time.Millisecond)
	miss := func() {
		t.Helper()
		spins := g.spins.Load()
		_, err := g.read(a, buf, false)
		require.ErrorIs(t, err, syscall.EAGAIN)
		require.Equal(t, spins+1, g.spins.Load(), "a spin")
	}
	miss()
	refused(g)
	miss()
	refused(g)
	refused(g)
	miss()
	for range 4 {
		refused(g)
	}
	go func() {
		time.Sleep(time.Millisecond / 10)
		_, _ = syncWrite(b, "y")
	}()
	g.limit.Store(int64(time.Minute))
	n, err = g.read(a, buf, false)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Zero(t, g.backoff.Load(), "an answered spin ends the back-off")
	g.limit.Store(int64(time.Millisecond))
	miss()
	refused(g)
	miss()

	// A yield that took longer than yieldMax (here any) ends the spin after one more read: a
	// miss if that read finds nothing, an answer if it finds bytes.
	c := allowed(10 * time.Second)
	c.yieldMax = 0
	start = time.Now()
	_, err = c.read(a, buf, false)
	require.ErrorIs(t, err, syscall.EAGAIN)
	require.Less(t, time.Since(start), 5*time.Second, "it did not spin to its limit")
	require.Equal(t, [2]int64{1, 0}, [2]int64{c.spins.Load(), c.answered.Load()})
	require.Equal(t, int32(1), c.skip.Load(), "a miss")
}

func syncWrite(fd int, s string) (int, error) { return syscall.Write(fd, []byte(s)) }

// TestSpinPipelinedWhileIdle: a wait with several requests in flight spins like a lone one
// unless the process's recent yields mostly took long (another thread wanted the CPU), when it
// parks without spinning; lone waits still spin then.
func TestSpinPipelinedWhileIdle(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	a, b := socketPair(t)
	buf := make([]byte, 16)
	g := allowed(time.Minute)
	_, err := syncWrite(b, "x")
	require.NoError(t, err)
	n, err := g.read(a, buf, true)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, int64(1), g.spins.Load(), "a pipelined wait spins on an idle process")

	// The recent yields took long: pipelined waits refuse at once; lone ones spin.
	for range 64 {
		g.noteYield(nanotime(), true)
	}
	start := time.Now()
	_, err = g.read(a, buf, true)
	require.ErrorIs(t, err, syscall.EAGAIN)
	require.Less(t, time.Since(start), 5*time.Second)
	require.Equal(t, int64(1), g.spins.Load(), "no spin while busy")
	_, err = syncWrite(b, "y")
	require.NoError(t, err)
	n, err = g.read(a, buf, false)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, int64(2), g.spins.Load(), "a lone wait still spins")

	// A record older than spinBusyFor lets a pipelined wait spin again.
	g.lastYield.Store(nanotime() - int64(spinBusyFor) - 1)
	require.False(t, g.busy(), "a stale record")
	// One long yield in many is not busy; a run of them is, and short ones wear it off.
	g = allowed(time.Minute)
	for i := range 3000 {
		g.noteYield(nanotime(), i%1000 == 0)
	}
	require.False(t, g.busy(), "1 long yield in 1,000")
	for range 16 {
		g.noteYield(nanotime(), true)
	}
	require.True(t, g.busy(), "16 long yields in a row")
	for range 128 {
		g.noteYield(nanotime(), false)
	}
	require.False(t, g.busy(), "short yields again")

	// Yields longer than yieldMax are recorded as long: with yieldMax 0 every yield is.
	g = allowed(20 * time.Millisecond)
	g.yieldMax = 0
	_, err = g.read(a, buf, false)
	require.ErrorIs(t, err, syscall.EAGAIN)
	require.Positive(t, g.longShare.Load(), "the long yield was recorded")
}
