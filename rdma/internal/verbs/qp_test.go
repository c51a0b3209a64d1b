package verbs

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

// pair is a client queue pair connected to a memory node's region on a fake network.
type pair struct {
	net   *FakeNet
	cdev  *FakeDevice
	sdev  *FakeDevice
	mem   []byte // the node's region
	mr    *Region
	q     *QP
	cqp   *FakeQP
	sqp   *FakeQP
	extra atomic.Int64
	lost  atomic.Int64
}

const regionSize = 1 << 20

func newPair(t *testing.T, cfg Config) *pair {
	t.Helper()
	return newPairOn(t, cfg, linkOpts{})
}

// linkOpts changes what connects a QP to the fake device, to show the fake catches a QP that
// breaks the device's rules.
type linkOpts struct {
	// depth is the device send queue's depth (default the QP's Depth).
	depth int
	// post, if set, stands between the QP and the fake device queue pair's Post.
	post func(fq *FakeQP, chain []WR) (int, error)
}

// newPairOn is newPair with the QP's link to the fake device changed by o.
func newPairOn(t *testing.T, cfg Config, o linkOpts) *pair {
	t.Helper()
	p := &pair{net: NewFakeNet()}
	p.net.Record = true
	p.cdev, p.sdev = p.net.NewDevice(FakeAttr), p.net.NewDevice(FakeAttr)
	words := make([]uint64, regionSize/8)
	p.mem = unsafeBytes(words)
	var err error
	p.mr, err = p.sdev.Register(p.mem)
	require.NoError(t, err)
	cfg.OnExtraRoundTrip = func() { p.extra.Add(1) }
	cfg.OnLost = func(error) { p.lost.Add(1) }
	if cfg.Name == "" {
		cfg.Name = "node 1"
	}
	p.q = New(cfg)
	p.cqp, p.sqp = connectOn(t, p.q, p.cdev, p.sdev, p.mr, o)
	t.Cleanup(func() {
		p.q.Fail(fmt.Errorf("test over: %w", farmem.ErrClosed))
		_ = p.sqp.Close()
	})
	return p
}

// connect connects a client queue pair on cdev to a new node queue pair on sdev and starts q
// on it, over the node's region mr.
func connect(t *testing.T, q *QP, cdev, sdev *FakeDevice, mr *Region) (*FakeQP, *FakeQP) {
	t.Helper()
	return connectOn(t, q, cdev, sdev, mr, linkOpts{})
}

// connectOn is connect with the link changed by o.
func connectOn(t *testing.T, q *QP, cdev, sdev *FakeDevice, mr *Region, o linkOpts) (*FakeQP, *FakeQP) {
	t.Helper()
	depth := q.cfg.Depth
	if o.depth > 0 {
		depth = o.depth
	}
	dq, err := cdev.CreateQP(QPConfig{Depth: depth, MaxInline: 64})
	require.NoError(t, err)
	sq, err := sdev.CreateQP(QPConfig{Depth: 1})
	require.NoError(t, err)
	require.NoError(t, sq.Connect(dq.Endpoint()))
	require.NoError(t, dq.Connect(sq.Endpoint()))
	fq := dq.(*FakeQP)
	if o.post != nil {
		dq = &interposedQP{FakeQP: fq, post: o.post}
	}
	require.NoError(t, q.Start(cdev, dq, Remote{Addr: mr.Addr, RKey: mr.RKey}))
	return fq, sq.(*FakeQP)
}

// interposedQP is a fake device queue pair whose Post goes through post, which may change
// the chain the QP posts before the fake device checks it. Everything else (Poll, Notify,
// Close, ...) is the fake's.
type interposedQP struct {
	*FakeQP
	post func(fq *FakeQP, chain []WR) (int, error)
}

func (d *interposedQP) Post(wrs []WR) (int, error) { return d.post(d.FakeQP, wrs) }

// stripFences posts chain with no fence on any work request: a QP that never fences.
func stripFences(fq *FakeQP, chain []WR) (int, error) {
	c := append([]WR(nil), chain...)
	for i := range c {
		c[i].Flags &^= FlagFence
	}
	return fq.Post(c)
}

// splitChains posts each work request of chain with its own doorbell: a QP that never
// chains.
func splitChains(fq *FakeQP, chain []WR) (int, error) {
	for i := range chain {
		if _, err := fq.Post(chain[i : i+1]); err != nil {
			return i, err
		}
	}
	return len(chain), nil
}

// unsignalWhere returns a post that clears the signal flag of each work request for which
// drop holds.
func unsignalWhere(drop func(WR) bool) func(*FakeQP, []WR) (int, error) {
	return func(fq *FakeQP, chain []WR) (int, error) {
		c := append([]WR(nil), chain...)
		for i := range c {
			if drop(c[i]) {
				c[i].Flags &^= FlagSignaled
			}
		}
		return fq.Post(c)
	}
}

func (p *pair) word(off uint64) uint64 { return binary.LittleEndian.Uint64(p.mem[off:]) }

func (p *pair) noViolations(t *testing.T) {
	t.Helper()
	require.Empty(t, p.net.Violations())
}

// sink records a batch's outcomes and signals done once every signaled op has one.
type sink struct {
	mu   sync.Mutex
	left int
	vals map[int]uint64
	errs map[int]error
	dup  int
	done chan struct{}
}

func newSink(b *farmem.Batch) *sink {
	s := &sink{vals: map[int]uint64{}, errs: map[int]error{}, done: make(chan struct{})}
	for i := range b.Ops {
		if !b.Ops[i].Unsignaled {
			s.left++
		}
	}
	if s.left == 0 {
		close(s.done)
	}
	return s
}

func (s *sink) Complete(i int, val uint64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.vals[i]; ok {
		s.dup++
		return
	}
	s.vals[i], s.errs[i] = val, err
	s.left--
	if s.left == 0 {
		close(s.done)
	}
}

func (s *sink) result(i int) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.vals[i], s.errs[i]
}

func (p *pair) do(t *testing.T, b *farmem.Batch) *sink {
	t.Helper()
	s := newSink(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p.q.Post(ctx, b, nil, s)
	require.NoError(t, p.q.Await(ctx, s.done))
	require.Zero(t, s.dup, "an op completed twice")
	return s
}

func (p *pair) addr(off uint64) farmem.Addr { return farmem.MakeAddr(1, off) }

// maskedWord sets the word at 0x3000 to 0xaabb with a CAS (a word atomics use is written only
// by atomics) and returns its address.
func (p *pair) maskedWord(t *testing.T) farmem.Addr {
	t.Helper()
	a := p.addr(0x3000)
	var init farmem.Batch
	init.CAS(a, 0, 0xaabb)
	p.do(t, &init)
	return a
}

func le(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func TestVerbsApplyAndReturn(t *testing.T) {
	p := newPair(t, Config{})
	var b farmem.Batch
	b.Write(p.addr(4096), []byte("hello, far memory"))
	b.CAS(p.addr(8192), 0, 41)
	b.CAS(p.addr(8192), 0, 99) // fails: the word is 41
	b.FAA(p.addr(8192), 1)
	got := make([]byte, 17)
	b.Read(p.addr(4096), got)
	s := p.do(t, &b)
	for i, want := range []uint64{0, 0, 41, 41, 0} {
		v, err := s.result(i)
		require.NoError(t, err, "op %d", i)
		require.Equal(t, want, v, "op %d", i)
	}
	require.Equal(t, "hello, far memory", string(got))
	require.Equal(t, uint64(42), p.word(8192))
	st := p.cqp.Stats()
	require.Equal(t, 1, st.Posts, "one doorbell for the batch")
	require.Equal(t, 1, st.Signaled, "one completion for the batch")
	p.noViolations(t)
}

func TestVerbsFencesWhereNeeded(t *testing.T) {
	p := newPair(t, Config{})
	buf := func() []byte { return make([]byte, 8) }
	var b farmem.Batch
	b.Read(p.addr(0x1000), buf())  // 0 READ
	b.Write(p.addr(0x2000), le(1)) // 1 WRITE after READ: fence
	b.Read(p.addr(0x3000), buf())  // 2 READ after WRITE: none
	b.Read(p.addr(0x3008), buf())  // 3 READ after READ: none
	b.FAA(p.addr(0x4000), 1)       // 4 atomic after READs: fence
	b.Read(p.addr(0x4000), buf())  // 5 READ after atomic: fence
	b.Write(p.addr(0x5000), le(2)) // 6 WRITE after READ: fence
	b.Write(p.addr(0x5008), le(3)) // 7 WRITE after WRITE: none
	b.CAS(p.addr(0x6000), 0, 1)    // 8 atomic after WRITEs (the READ before is fenced off): none
	b.CAS(p.addr(0x6000), 1, 2)    // 9 atomic after atomic: fence
	p.do(t, &b)
	chains := p.cqp.Chains()
	require.Len(t, chains, 1)
	var fenced []int
	for i, w := range chains[0] {
		if w.Fenced() {
			fenced = append(fenced, i)
		}
	}
	require.Equal(t, []int{1, 4, 5, 6, 9}, fenced)
	require.Equal(t, uint64(2), p.word(0x6000))
	p.noViolations(t)

	// Across batches: a WRITE after a READ of an earlier batch still in flight is fenced; once
	// the READ completed, nothing is.
	var r, w farmem.Batch
	r.Read(p.addr(0x1000), buf())
	w.Write(p.addr(0x1000), le(7))
	s := newSink(&r)
	p.q.Post(context.Background(), &r, nil, s)
	p.q.Post(context.Background(), &w, nil, newSink(&w))
	require.NoError(t, p.q.Await(context.Background(), s.done))
	p.do(t, &w)
	chains = p.cqp.Chains()
	require.Len(t, chains, 4)
	// The write posted while the read may still be in flight is fenced unless its completion
	// was already polled; the last one, posted after it was, is not.
	require.False(t, chains[3][0].Fenced())
	p.noViolations(t)
}

// A QP that never fences (its fences are stripped on the way to the device) is caught.
func TestVerbsMissingFenceIsCaught(t *testing.T) {
	p := newPairOn(t, Config{}, linkOpts{post: stripFences})
	var b farmem.Batch
	b.Read(p.addr(0x1000), make([]byte, 8))
	b.Write(p.addr(0x1000), le(1))
	p.do(t, &b)
	v := p.net.Violations()
	require.Len(t, v, 1)
	require.Contains(t, v[0], "no fence")
}

func TestVerbsSignalingPeriod(t *testing.T) {
	p := newPair(t, Config{Depth: 16, SignalEvery: 4})
	const n = 100
	for range n {
		var b farmem.Batch
		b.Unsignaled(b.FAA(p.addr(0x100), 1))
		p.do(t, &b) // nothing to wait for
	}
	got := make([]byte, 8)
	var b farmem.Batch
	b.Read(p.addr(0x100), got)
	p.do(t, &b)
	require.Equal(t, uint64(n), binary.LittleEndian.Uint64(got), "unsignaled FAAs applied before the read")
	st := p.cqp.Stats()
	require.LessOrEqual(t, st.MaxRun, 3, "at most SignalEvery-1 unsignaled in a row")
	require.LessOrEqual(t, st.MaxInflight, 16)
	require.Equal(t, n+1, st.WRs)
	require.Equal(t, 1+n/4, st.Signaled, "every fourth FAA and the read")
	p.noViolations(t)
}

// A QP that signals only the work requests somebody waits for fills the send queue with
// unsignaled work requests nothing retires: the fake catches it, the QP fails its waiting
// work as down and reports that unsignaled ops may be lost. The QP's periodic signals are
// stripped on the way to the device: every FAA here is an unsignaled op, so each signal on
// one is a periodic signal.
func TestVerbsWithoutPeriodicSignalingTheQueueJams(t *testing.T) {
	noPeriodic := unsignalWhere(func(w WR) bool { return w.Opcode == OpFAA })
	p := newPairOn(t, Config{Depth: 8, DownTimeout: 200 * time.Millisecond}, linkOpts{post: noPeriodic})
	for range 20 {
		var b farmem.Batch
		b.Unsignaled(b.FAA(p.addr(0x100), 1))
		p.q.Post(context.Background(), &b, nil, newSink(&b))
	}
	// Post does not wait for the jammed queue; the down timeout kills the queue pair.
	require.Eventually(t, func() bool { return !p.q.Alive() }, 20*time.Second, time.Millisecond)
	var b farmem.Batch
	b.Read(p.addr(0x100), make([]byte, 8))
	s := p.do(t, &b)
	_, err := s.result(0)
	require.ErrorIs(t, err, farmem.ErrNodeDown, "the queue nothing retires killed the queue pair")
	require.NotEmpty(t, p.net.Violations())
	require.Contains(t, p.net.Violations()[0], "full of unsignaled")
	require.Positive(t, p.lost.Load(), "the client learns its unsignaled ops may be lost")
}

func TestVerbsDeepBatchRespectsTheSendQueue(t *testing.T) {
	p := newPair(t, Config{Depth: 8, SignalEvery: 8})
	var b farmem.Batch
	bufs := make([][]byte, 50)
	for i := range 50 {
		b.Write(p.addr(uint64(0x1000+16*i)), le(uint64(i)+1))
		bufs[i] = make([]byte, 8)
		b.Read(p.addr(uint64(0x1000+16*i)), bufs[i])
	}
	p.do(t, &b)
	for i := range 50 {
		require.Equal(t, uint64(i)+1, binary.LittleEndian.Uint64(bufs[i]))
	}
	st := p.cqp.Stats()
	require.Equal(t, 100, st.WRs)
	require.LessOrEqual(t, st.MaxInflight, 8)
	require.GreaterOrEqual(t, st.Posts, 100/8)
	p.noViolations(t)
}

// A QP that posts beyond the send queue's free space is caught, and the device's refusal
// kills it. The QP here believes the send queue twice as deep as the device made it, so its
// own accounting lets it post past the device's space.
func TestVerbsOverfilledSendQueueIsCaught(t *testing.T) {
	p := newPairOn(t, Config{Depth: 8}, linkOpts{depth: 4})
	var b farmem.Batch
	for i := range 10 {
		b.Write(p.addr(uint64(0x1000+8*i)), le(1))
	}
	s := p.do(t, &b)
	require.False(t, p.q.Alive(), "the refused post killed the queue pair")
	require.Contains(t, strings.Join(p.net.Violations(), "\n"), "full send queue")
	for i := range 10 {
		_, err := s.result(i)
		require.ErrorIs(t, err, farmem.ErrNodeDown, "write %d", i)
	}
}

// A batch rings one doorbell; a QP that posted each op alone (its chain split on the way to
// the device) is seen ringing one per op.
func TestVerbsOneDoorbellPerBatch(t *testing.T) {
	for _, broken := range []bool{false, true} {
		var link linkOpts
		if broken {
			link.post = splitChains
		}
		p := newPairOn(t, Config{}, link)
		var b farmem.Batch
		for i := range 20 {
			b.FAA(p.addr(uint64(0x1000+8*i)), 1)
		}
		p.do(t, &b)
		st := p.cqp.Stats()
		if broken {
			require.Equal(t, 20, st.Posts, "the broken variant rings a doorbell per op")
			continue
		}
		require.Equal(t, 1, st.Posts)
		require.Equal(t, 1, st.Signaled)
		p.noViolations(t)
	}
}

func TestVerbsStagingRing(t *testing.T) {
	p := newPair(t, Config{Staging: 4096, Depth: 64})
	// Reads and writes of 600 bytes: the 4 KiB ring wraps many times.
	for round := range 20 {
		var b farmem.Batch
		want := make([][]byte, 4)
		got := make([][]byte, 4)
		for i := range 4 {
			want[i] = make([]byte, 600)
			for j := range want[i] {
				want[i][j] = byte(round*7 + i*3 + j)
			}
			off := uint64(0x10000 + 1024*i)
			b.Write(p.addr(off), want[i])
			got[i] = make([]byte, 600)
			b.Read(p.addr(off), got[i])
		}
		p.do(t, &b)
		require.Equal(t, want, got, "round %d", round)
	}
	// An op larger than a quarter of the ring gets its own registration, released after.
	big := make([]byte, 3000)
	for i := range big {
		big[i] = byte(i)
	}
	back := make([]byte, 3000)
	var b farmem.Batch
	b.Write(p.addr(0x20000), big)
	b.Read(p.addr(0x20000), back)
	p.do(t, &b)
	require.Equal(t, big, back)
	require.Equal(t, 1, p.cdev.Regions(), "only the ring stays registered")
	p.noViolations(t)
}

func TestVerbsInline(t *testing.T) {
	p := newPair(t, Config{})
	var b farmem.Batch
	b.Write(p.addr(0x1000), make([]byte, 64))
	b.Write(p.addr(0x2000), make([]byte, 65))
	p.do(t, &b)
	ws := p.cqp.Chains()[0]
	require.NotZero(t, ws[0].Flags&FlagInline)
	require.Zero(t, ws[1].Flags&FlagInline)
	p.noViolations(t)
}

func TestVerbsMaskedCAS(t *testing.T) {
	p := newPair(t, Config{})
	a := p.maskedWord(t)

	cases := []struct {
		name        string
		cmp, cmpM   uint64
		swap, swapM uint64
		prev, after uint64
		extra       int64
	}{
		{"hit after a retry", 0xbb, 0xff, 0x1100, 0xff00, 0xaabb, 0x11bb, 1},
		{"miss in one try", 0xcc, 0xff, 0, ^uint64(0), 0x11bb, 0x11bb, 0},
		{"full compare is one CAS", 0x11bb, ^uint64(0), 0x22, 0xff, 0x11bb, 0x1122, 0},
		{"empty swap mask reads", 0, 0, 5, 0, 0x1122, 0x1122, 0},
		{"guess right first", 0x1122, 0xffff, 0x3300, 0xff00, 0x1122, 0x3322, 0},
	}
	for _, tc := range cases {
		before := p.extra.Load()
		var b farmem.Batch
		b.MaskedCAS(a, tc.cmp, tc.cmpM, tc.swap, tc.swapM)
		s := p.do(t, &b)
		v, err := s.result(0)
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.prev, v, tc.name)
		require.Equal(t, tc.after, p.word(0x3000), tc.name)
		require.Equal(t, tc.extra, p.extra.Load()-before, "%s: extra round trips", tc.name)
	}

	// Ops after a looping MaskedCAS in its batch wait for it and observe it: one extra round
	// trip for them, one for the retry.
	before := p.extra.Load()
	chainsBefore := len(p.cqp.Chains())
	got := make([]byte, 8)
	var b farmem.Batch
	b.MaskedCAS(a, 0x22, 0xff, 0x4400, 0xff00)
	b.Read(a, got)
	s := p.do(t, &b)
	v, err := s.result(0)
	require.NoError(t, err)
	require.Equal(t, uint64(0x3322), v)
	require.Equal(t, uint64(0x4422), binary.LittleEndian.Uint64(got), "the read saw the MaskedCAS")
	require.Equal(t, int64(2), p.extra.Load()-before)
	chains := p.cqp.Chains()[chainsBefore:]
	require.Len(t, chains, 3, "the first attempt, the retry, then the read")
	require.Equal(t, OpRead, chains[2][0].Opcode)
	p.noViolations(t)
}

func TestVerbsMaskedCASContention(t *testing.T) {
	net := NewFakeNet()
	sdev := net.NewDevice(FakeAttr)
	mem := unsafeBytes(make([]uint64, 512))
	mr, err := sdev.Register(mem)
	require.NoError(t, err)
	const clients, rounds = 4, 50
	var wg sync.WaitGroup
	var extra atomic.Int64
	for c := range clients {
		cdev := net.NewDevice(FakeAttr)
		q := New(Config{OnExtraRoundTrip: func() { extra.Add(1) }})
		connect(t, q, cdev, sdev, mr)
		defer q.Fail(farmem.ErrClosed)
		// Client c counts in its own byte of the word with a MaskedCAS on that byte.
		shift := uint(8 * c)
		wg.Go(func() {
			for r := range rounds {
				var b farmem.Batch
				b.MaskedCAS(farmem.MakeAddr(1, 64), uint64(r)<<shift, 0xff<<shift, uint64(r+1)<<shift, 0xff<<shift)
				s := newSink(&b)
				q.Post(context.Background(), &b, nil, s)
				if q.Await(context.Background(), s.done) != nil {
					return
				}
				if v, err := s.result(0); err != nil || (v>>shift)&0xff != uint64(r) {
					t.Errorf("client %d round %d: %#x, %v", c, r, v, err)
					return
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, uint64(0x32323232), binary.LittleEndian.Uint64(mem[64:]), "no update lost")
	t.Logf("%d extra round trips for %d contended MaskedCASes", extra.Load(), clients*rounds)
	require.Empty(t, net.Violations())
}

func TestVerbsPipelinedCompletionsMatchOps(t *testing.T) {
	p := newPair(t, Config{Depth: 32, SignalEvery: 8})
	const n = 300
	for i := range n {
		binary.LittleEndian.PutUint64(p.mem[0x8000+8*i:], uint64(i)*3+1)
	}
	sinks := make([]*sink, n)
	bufs := make([][]byte, n)
	ctx := context.Background()
	for i := range n {
		var b farmem.Batch
		bufs[i] = make([]byte, 8)
		b.Read(p.addr(uint64(0x8000+8*i)), bufs[i])
		b.FAA(p.addr(uint64(0x8000+8*i)), 1)
		sinks[i] = newSink(&b)
		p.q.Post(ctx, &b, nil, sinks[i])
	}
	for i := range n {
		require.NoError(t, p.q.Await(ctx, sinks[i].done))
		v, err := sinks[i].result(1)
		require.NoError(t, err)
		require.Equal(t, uint64(i)*3+1, v, "FAA %d", i)
		require.Equal(t, uint64(i)*3+1, binary.LittleEndian.Uint64(bufs[i]), "read %d", i)
		require.Zero(t, sinks[i].dup)
	}
	p.noViolations(t)
}

func TestVerbsErrorCompletions(t *testing.T) {
	for _, tc := range []struct {
		st   Status
		want error
	}{
		{StatusRemAccessErr, farmem.ErrOutOfRange},
		{StatusRetryExcErr, farmem.ErrNodeDown},
		{StatusRemInvReqErr, farmem.ErrInvalid},
	} {
		p := newPair(t, Config{})
		var b, later farmem.Batch
		b.FAA(p.addr(0x100), 1)       // applied
		b.Write(p.addr(0x200), le(1)) // fails with tc.st
		b.FAA(p.addr(0x108), 1)       // flushed
		later.FAA(p.addr(0x110), 1)   // flushed
		p.cdev.FailAfter(1, tc.st)
		s, s2 := newSink(&b), newSink(&later)
		p.q.Post(context.Background(), &b, nil, s)
		p.q.Post(context.Background(), &later, nil, s2)
		require.NoError(t, p.q.Await(context.Background(), s.done))
		require.NoError(t, p.q.Await(context.Background(), s2.done))
		v, err := s.result(0)
		require.NoError(t, err, "%v: the op before the failure", tc.st)
		require.Zero(t, v)
		_, err = s.result(1)
		require.ErrorIs(t, err, tc.want, "%v: the failing op", tc.st)
		_, err = s.result(2)
		if tc.want == farmem.ErrNodeDown {
			require.ErrorIs(t, err, farmem.ErrNodeDown, "%v: a later op of the batch", tc.st)
		} else {
			require.ErrorIs(t, err, farmem.ErrAborted, "%v: a later op of the batch", tc.st)
		}
		_, err = s2.result(0)
		require.ErrorIs(t, err, farmem.ErrNodeDown, "%v: a later batch", tc.st)
		require.False(t, p.q.Alive())
		require.Equal(t, uint64(1), p.word(0x100), "the op before the failure applied once")
		require.Zero(t, p.word(0x108), "nothing after the failure applied")
		p.noViolations(t)
	}
}

func TestVerbsDeadPeerIsDownInTime(t *testing.T) {
	const down = 300 * time.Millisecond
	p := newPair(t, Config{DownTimeout: down})
	var warm farmem.Batch
	warm.FAA(p.addr(0x100), 1)
	p.do(t, &warm)
	p.sdev.SetDown(true)
	var b farmem.Batch
	b.Read(p.addr(0x100), make([]byte, 8))
	b.FAA(p.addr(0x100), 1)
	start := time.Now()
	s := p.do(t, &b)
	took := time.Since(start)
	for i := range 2 {
		_, err := s.result(i)
		require.ErrorIs(t, err, farmem.ErrNodeDown)
	}
	t.Logf("a dead peer was reported down after %v (down timeout %v)", took, down)
	require.GreaterOrEqual(t, took, down*9/10, "reported before the down timeout")
	require.Less(t, took, down+down/2, "reported late")
	require.False(t, p.q.Alive())

	// Work posted after the failure fails at once.
	var after farmem.Batch
	after.FAA(p.addr(0x100), 1)
	s = p.do(t, &after)
	_, err := s.result(0)
	require.ErrorIs(t, err, farmem.ErrNodeDown)
}

func TestVerbsPostBeforeStart(t *testing.T) {
	net := NewFakeNet()
	cdev, sdev := net.NewDevice(FakeAttr), net.NewDevice(FakeAttr)
	mem := unsafeBytes(make([]uint64, 1024))
	mr, err := sdev.Register(mem)
	require.NoError(t, err)
	q := New(Config{})
	defer q.Fail(farmem.ErrClosed)
	var b farmem.Batch
	src := le(77)
	b.Write(farmem.MakeAddr(1, 64), src)
	got := make([]byte, 8)
	b.Read(farmem.MakeAddr(1, 64), got)
	s := newSink(&b)
	q.Post(context.Background(), &b, nil, s)
	src[0] = 0 // the batch's buffer is the caller's again once Post returns
	connect(t, q, cdev, sdev, mr)
	require.NoError(t, q.Await(context.Background(), s.done))
	require.Equal(t, uint64(77), binary.LittleEndian.Uint64(got))
	require.Empty(t, net.Violations())
}

func TestVerbsFailIsIdempotentAndReportsLoss(t *testing.T) {
	p := newPair(t, Config{DownTimeout: time.Hour})
	p.sdev.SetDown(true)
	var b farmem.Batch
	b.Unsignaled(b.Write(p.addr(0x100), le(1)))
	p.q.Post(context.Background(), &b, nil, newSink(&b))
	p.q.Fail(fmt.Errorf("test: %w", farmem.ErrNodeDown))
	p.q.Fail(fmt.Errorf("again: %w", farmem.ErrNodeDown))
	require.Equal(t, int64(1), p.lost.Load(), "an unconfirmed unsignaled write is reported once")
	require.False(t, p.q.Alive())
	require.Equal(t, 0, p.cdev.Regions(), "staging released")

	// Closing (ErrClosed) reports no loss.
	p2 := newPair(t, Config{})
	p2.sdev.SetDown(true)
	var u farmem.Batch
	u.Unsignaled(u.Write(p2.addr(0x100), le(1)))
	p2.q.Post(context.Background(), &u, nil, newSink(&u))
	p2.q.Fail(farmem.ErrClosed)
	require.Zero(t, p2.lost.Load())
}

func TestVerbsAwaitHonorsContext(t *testing.T) {
	p := newPair(t, Config{DownTimeout: time.Hour})
	p.sdev.SetDown(true)
	var b farmem.Batch
	b.Read(p.addr(0x100), make([]byte, 8))
	s := newSink(&b)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	p.q.Post(ctx, &b, nil, s)
	require.ErrorIs(t, p.q.Await(ctx, s.done), context.DeadlineExceeded)
	p.q.Fail(farmem.ErrClosed)
	<-s.done
	_, err := s.result(0)
	require.ErrorIs(t, err, farmem.ErrClosed)
}

func TestRetryParams(t *testing.T) {
	for _, d := range []time.Duration{time.Millisecond, 250 * time.Millisecond, time.Second, 10 * time.Second, time.Hour} {
		to, rc := RetryParams(d)
		require.Equal(t, uint8(7), rc)
		require.GreaterOrEqual(t, to, uint8(8))
		require.LessOrEqual(t, to, uint8(24))
		total := ackUnit << to * time.Duration(rc+1)
		if to > 8 && to < 24 {
			require.LessOrEqual(t, total, d/2, "%v: the NIC gives up after %v", d, total)
			require.Greater(t, total, d/8, "%v: the NIC gives up after only %v", d, total)
		}
	}
}

// unsafeBytes views words as bytes (8-byte aligned, as registered memory is).
func unsafeBytes(words []uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
}

// A waiter that has stopped spinning and sleeps is woken by its op's completion, whichever
// goroutine polled it: here two waiters share a queue pair, and each may deliver the other's.
func TestVerbsSleepingWaiterWakes(t *testing.T) {
	p := newPair(t, Config{})
	p.net.Latency = time.Millisecond
	for round := range 20 {
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for k := range 4 {
			var b farmem.Batch
			b.FAA(p.addr(0x100), 1)
			// Like the rdma package's single verbs, the op signals a one-token channel.
			s := tokenSink(make(chan struct{}, 1))
			p.q.Post(context.Background(), &b, nil, s)
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				errs[k] = p.q.Await(ctx, s)
			})
		}
		wg.Wait()
		for k, err := range errs {
			require.NoError(t, err, "round %d waiter %d", round, k)
		}
	}
}

// tokenSink signals a one-token channel when its op completes.
type tokenSink chan struct{}

func (s tokenSink) Complete(int, uint64, error) {
	select {
	case s <- struct{}{}:
	default:
	}
}

// Batches posted while a MaskedCAS loop settles wait behind it, copied out of their batches
// (the caller may reuse its buffers once Post returns), and Post blocks once more than
// MaxQueued ops wait.
func TestVerbsPostsBehindAMaskedCAS(t *testing.T) {
	p := newPair(t, Config{MaxQueued: 3})
	p.net.Latency = 200 * time.Microsecond
	a := p.maskedWord(t)
	ctx := context.Background()
	var m farmem.Batch
	m.MaskedCAS(a, 0xbb, 0xff, 0x1100, 0xff00) // needs a retry
	ms := newSink(&m)
	p.q.Post(ctx, &m, nil, ms)
	const n = 10
	sinks := make([]*sink, n)
	got := make([][]byte, n)
	buf := make([]byte, 8)
	for i := range n {
		var b farmem.Batch
		binary.LittleEndian.PutUint64(buf, uint64(i)+100)
		b.Write(p.addr(uint64(0x4000+8*i)), buf)
		got[i] = make([]byte, 8)
		b.Read(a, got[i])
		sinks[i] = newSink(&b)
		p.q.Post(ctx, &b, nil, sinks[i])
		clear(buf) // the batch's buffer is the caller's again
	}
	require.NoError(t, p.q.Await(ctx, ms.done))
	for i := range n {
		require.NoError(t, p.q.Await(ctx, sinks[i].done))
		require.Equal(t, uint64(i)+100, p.word(uint64(0x4000+8*i)), "write %d", i)
		require.Equal(t, uint64(0x11bb), binary.LittleEndian.Uint64(got[i]), "read %d saw the MaskedCAS", i)
	}
	p.noViolations(t)
}

// An unsignaled MaskedCAS still settles before the next op.
func TestVerbsUnsignaledMaskedCAS(t *testing.T) {
	p := newPair(t, Config{})
	a := p.maskedWord(t)
	var b farmem.Batch
	b.Unsignaled(b.MaskedCAS(a, 0xbb, 0xff, 0x1100, 0xff00))
	p.q.Post(context.Background(), &b, nil, newSink(&b))
	got := make([]byte, 8)
	var r farmem.Batch
	r.Read(a, got)
	p.do(t, &r)
	require.Equal(t, uint64(0x11bb), binary.LittleEndian.Uint64(got))
	require.Equal(t, int64(1), p.extra.Load(), "its retry")
	p.noViolations(t)
}
