package rdma

import (
	"fmt"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/internal/wire"
)

// Connections to a restarted node's old process. A client's connection to a node that nothing
// was outstanding on when the node's process died learns of its end only when it is next used:
// the write goes out, and the read meets the end of the stream, failing that verb with
// farmem.ErrNodeDown (its outcome unknown) although the node is back. A process holds one such
// idle connection per client of its pool and one control connection per node, so after a
// restart each would fail one verb: a replicated structure counts each against its quorum,
// and with one more replica down, an operation fails that the live replicas could have served.
//
// So the fabric retires them: when a handshake (of any connection) meets another incarnation
// of a node than the one met before, every connection to the node that is set up to an older
// incarnation and has nothing outstanding is failed at once (failing nothing: no request is on
// it; unsignaled ops it carried unconfirmed are reported as lost on the client's next op, as
// always), so the client's next op to the node dials the new process; the control connection,
// which a request holds while it dials, is checked and re-dialed by its next request. A
// connection with requests outstanding is left alone: its reader meets the stream's end and
// fails them, as before, since they may have reached the old process. Retiring costs a scan of
// the fabric's connections per restart met; the data path is untouched.

// learned records what a Welcome from p says (peer.learn) and, if it names another
// incarnation than the one met before, retires the idle connections to older ones.
func (f *Fabric) learned(p *peer, w wire.Welcome) {
	if prev := p.learn(w); prev != 0 && w.Incarnation != 0 && prev != w.Incarnation {
		f.retireIdle(p, w.Incarnation)
	}
}

// retireIdle fails the connections to p that are set up to another incarnation than inc and
// have nothing outstanding.
func (f *Fabric) retireIdle(p *peer, inc uint64) {
	qs := f.liveTo(p)
	err := fmt.Errorf("rdma: %v restarted (incarnation %#x): the connection to its old process is closed: %w", p.id, inc, farmem.ErrNodeDown)
	for _, q := range qs {
		q.failWith(err, false, inc)
	}
}

// retired reports whether the control connection reaches another incarnation than the one the
// fabric last met (c.mu held): the node restarted since it was dialed.
func (c *ctlConn) retired() bool {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	return c.inc != 0 && c.p.life.seen != 0 && c.p.life.seen != c.inc
}

// liveTo returns the fabric's live connections to p.
func (f *Fabric) liveTo(p *peer) []*tlink {
	var qs []*tlink
	f.qmu.Lock()
	defer f.qmu.Unlock()
	for q := range f.live {
		if q.p == p {
			qs = append(qs, q)
		}
	}
	return qs
}
