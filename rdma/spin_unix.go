//go:build unix

package rdma

import (
	"runtime"
	"syscall"
)

// read is a non-blocking read of fd into b that, if the governor lets this wait spin, keeps
// trying for up to the spin limit while the socket is empty, yielding the CPU between tries. It
// returns what the last read returned: syscall.EAGAIN if the socket stayed empty (or the wait
// did not spin), with nothing read.
func (g *spinGov) read(fd int, b []byte, pipelined bool) (int, error) {
	limit := g.limit.Load()
	if limit == 0 {
		return 0, syscall.EAGAIN
	}
	if pipelined && g.busy() {
		return 0, syscall.EAGAIN
	}
	if g.skip.Load() > 0 {
		g.skip.Add(-1)
		return 0, syscall.EAGAIN
	}
	now := nanotime()
	if g.procs.Load() == 0 || now-g.procsAt.Load() >= procsEvery {
		g.procsAt.Store(now)
		g.procs.Store(int32(runtime.GOMAXPROCS(0)))
	}
	if g.procs.Load() < 2 || g.spinning.Load() || !g.spinning.CompareAndSwap(false, true) {
		return 0, syscall.EAGAIN
	}
	until := now + limit
	var n int
	var err error
	for last := false; ; {
		n, err = sysRead(fd, b)
		if (err != syscall.EAGAIN && err != syscall.EINTR) || last {
			break
		}
		t := nanotime()
		if t >= until {
			break
		}
		schedYield()
		// A yield that took long gave the CPU to a thread that wanted it: a CPU shared with
		// other work, where the next yield may cost a whole time slice while the answer waits
		// unread. One more read, then park; and waits with several requests in flight park
		// without spinning for a while (busy).
		y := nanotime()
		last = y-t > g.yieldMax
		g.noteYield(y, last)
	}
	g.spinning.Store(false)
	if err == syscall.EINTR {
		err = syscall.EAGAIN
	}
	g.spins.Add(1)
	g.spent.Add(nanotime() - now)
	if err == syscall.EAGAIN {
		// A miss: park without spinning for a while, longer after each miss in a row.
		k := min(max(2*g.backoff.Load(), 1), spinSkipMax)
		g.backoff.Store(k)
		g.skip.Store(k)
		return 0, err
	}
	g.answered.Add(1)
	if g.backoff.Load() != 0 {
		g.backoff.Store(0)
	}
	return n, err
}
