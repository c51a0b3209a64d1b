package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/kvstore"
)

// inspectConfiguration prints the store's configuration as its descriptor records it
// (kvstore.Describe: the row of kvstore's options matrix for its kind), and each memory node's
// part in it: home, metadata replica, index replica.
func inspectConfiguration(ctx context.Context, m farmem.Memory, in kvstore.Info, w io.Writer) error {
	c := kvstore.Describe(in.Descriptor)
	yes := func(v bool) string {
		if v {
			return "yes"
		}
		return "no"
	}
	cache := c.Cache
	if cache == "" {
		cache = "none"
	}
	fmt.Fprintln(w, "store configuration (kvstore's options matrix)")
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "  index\t%s (scans: %s)\n", c.Index, yes(c.Ordered))
	fmt.Fprintf(tw, "  sync\t%s\n", c.Sync)
	fmt.Fprintf(tw, "  metadata replicas\t%d\n", c.MetaReplicas)
	fmt.Fprintf(tw, "  index replicas\t%d\n", c.IndexReplicas)
	fmt.Fprintf(tw, "  proxying\t%s\n", yes(c.Proxy))
	kv := yes(c.KVCache)
	if c.KVCache {
		kv += " (unless a process opens it with FlexKV.NoKVCache, which is not recorded)"
	}
	fmt.Fprintf(tw, "  KV cache\t%s\n", kv)
	fmt.Fprintf(tw, "  compute-side cache\t%s\n", cache)
	if c.Proxy || c.Cache != "" {
		fmt.Fprintf(tw, "  compute-node state\tkept in each process (partition owners, caches), not in far memory: not shown\n")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	hh, err := alloc.Open(ctx, m, in.Home)
	if err != nil {
		fmt.Fprintf(w, "  (home header: %v)\n", err)
		return nil
	}
	meta := alloc.MetaNodes(m.Topology(), hh)
	index := indexReplicaNodes(m.Topology(), meta, c.IndexReplicas)
	fmt.Fprintln(w, "memory nodes (parts in the store)")
	tw = tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "  node\tparts")
	for _, id := range m.Topology().MemoryNodes() {
		var parts []string
		if id == in.Home {
			parts = append(parts, "home (allocator, root word, descriptor)")
		} else if slices.Contains(meta, id) && len(meta) > 1 {
			parts = append(parts, "metadata replica")
		}
		if slices.Contains(index, id) {
			parts = append(parts, "index replica")
		}
		parts = append(parts, "KV blocks")
		fmt.Fprintf(tw, "  %v\t%s\n", id, strings.Join(parts, ", "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return nil
}

// indexReplicaNodes is where a RACE index replicated r ways lives, by race.IndexReplicaNodes'
// rule: the metadata nodes when there are r of them, else the r highest memory nodes (none for
// r = 1).
func indexReplicaNodes(t *farmem.Topology, meta []farmem.NodeID, r int) []farmem.NodeID {
	if r <= 1 {
		return nil
	}
	if len(meta) == r {
		return meta
	}
	mem := t.MemoryNodes()
	if len(mem) < r {
		return nil
	}
	return mem[len(mem)-r:]
}
