package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/kvstore"
)

// inspectLives prints each memory node's incarnation and state as this process's fabric sees
// them (transports without restarts show "-" and "up"), and the generation the store on the
// fabric records for it (Store.Adopt bumps it when a restart's loss is acknowledged).
func inspectLives(ctx context.Context, m farmem.Memory, w io.Writer) error {
	var gens map[farmem.NodeID]kvstore.GenWord
	genErr := ""
	if in, err := kvstore.Inspect(ctx, m); err == nil && in.Word.State() == kvstore.RootReady {
		if gens, err = kvstore.Generations(ctx, m, in.Home); err != nil {
			genErr = err.Error()
		}
	} else {
		genErr = "no store"
	}
	fmt.Fprintln(w, "memory nodes (restarts)")
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "  node\tstate\tincarnation\tgeneration\tadopted incarnation")
	for _, id := range m.Topology().MemoryNodes() {
		st := farmem.StatusOf(m, id)
		inc := "-"
		if st.Seen != 0 {
			inc = fmt.Sprintf("%#016x", st.Seen)
		}
		gen, adopted := "-", "-"
		if g, ok := gens[id]; ok {
			gen = fmt.Sprint(g.Generation())
			if g.Generation() > 0 {
				adopted = fmt.Sprintf("...%012x", g.Incarnation())
			}
		} else if genErr != "" {
			gen = "(" + genErr + ")"
		}
		fmt.Fprintf(tw, "  %v\t%v\t%s\t%s\t%s\n", id, st.State, inc, gen, adopted)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return nil
}
