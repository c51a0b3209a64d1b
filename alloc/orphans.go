package alloc

import (
	"context"
	"encoding/binary"
	"slices"

	"github.com/farmem/farmem/farmem"
)

// Records of closed clients. A handover record waits for the next allocator of its client id
// (see the package doc, Handover). An allocation that finds no room does not wait for that:
// before it waits for its own retired blocks (waitReclaim), the allocator reads every client's
// handover word (one read of the table on the home node) and takes over the records other
// client ids published, exactly as New takes its own: the word is cleared with a CAS in the
// batch that reads the record's head, so each record goes to one taker whichever ids race
// for it (a New of the record's own id then finds its word empty and starts with nothing),
// and each record is validated against headers read again (one more round trip) before
// anything in it is used. What a record holds is safe in any allocator: free blocks and
// chunks are free, and retired blocks keep their epoch tags, so they become reusable exactly
// when they would have for their closed owner. A record that cannot be read is put back in
// its word; a corrupt one is lost, as it would be for New, and counted in
// Stats.OrphanErrors. Costs: one round trip when no other id published a record, which an
// allocator out of room pays at most once per Options.Refresh; otherwise two, plus a round
// trip or two per record taken. Not done with replicated metadata (FormatOptions.Replicas >
// 1), whose handover words are kept on a majority of nodes: there the records wait for
// their own ids.
func (a *Allocator) adoptOrphans(ctx context.Context) bool {
	if a.rep != nil || a.slots <= 1 {
		return false
	}
	now := a.rt.Now()
	if a.orphanScanned && now < a.orphanScan.Add(a.opts.Refresh) {
		return false
	}
	a.orphanScan, a.orphanScanned = now, true
	first := farmem.MakeAddr(a.home, HandoverOffset+8)
	buf := make([]byte, 8*a.slots)
	if !inNode(a.m.Topology(), first, uint64(len(buf))) {
		return false
	}
	if err := a.m.Read(ctx, first, buf); err != nil {
		return false
	}
	type published struct {
		id farmem.ClientID
		w  uint64
	}
	var found []published
	for i := range a.slots {
		id := farmem.ClientID(i + 1)
		if w := binary.LittleEndian.Uint64(buf[8*i:]); w != 0 && id != a.id {
			found = append(found, published{id, w})
		}
	}
	if len(found) == 0 {
		return false
	}
	nodes := slices.Clone(a.nodes)
	if !slices.Contains(nodes, a.home) {
		nodes = append(nodes, a.home)
	}
	hdrs, _, err := readHeaders(ctx, a.m, nodes, 0)
	if err != nil {
		return false
	}
	took := false
	for _, p := range found {
		var ad Adoption
		at := first.Add(8 * uint64(p.id-1))
		if err := a.adoptChain(ctx, at, p.id, p.w, hdrs, &ad); err != nil {
			continue
		}
		if ad.Err != nil {
			a.stats.OrphanErrors++
		}
		if ad.Records > 0 {
			a.stats.Orphans += uint64(ad.Records)
			took = true
		}
	}
	if took {
		a.shed(ctx)
	}
	return took
}
