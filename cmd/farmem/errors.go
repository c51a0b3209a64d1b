package main

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/farmem/farmem/farmem"
)

// libraryPrefixes are the package names farmem's libraries start their errors with. A chain
// of wrapped errors repeats them ("rdma: ...: rdma: ...: farmem: node down"); the CLI speaks
// for all of them, so it drops them.
var libraryPrefixes = map[string]bool{
	"farmem": true, "rdma": true, "kvstore": true, "alloc": true, "race": true, "bench": true,
	"cxl": true, "sim": true, "local": true, "transport": true, "wire": true, "far": true,
	"cider": true, "qlock": true, "ptrsync": true, "numaemu": true,
}

// tidy returns err's text for a person: without the libraries' package prefixes, and without
// a part repeated right after itself.
func tidy(err error) string {
	parts := strings.Split(err.Error(), ": ")
	out := parts[:0]
	for _, p := range parts {
		if libraryPrefixes[p] {
			continue
		}
		if len(out) > 0 && out[len(out)-1] == p {
			continue
		}
		out = append(out, p)
	}
	return strings.Join(out, ": ")
}

var nodeName = regexp.MustCompile(`\bn[0-9]+\b`)

// explain is tidy plus what the user can do about the failures a user can act on: a memory
// node that restarted and lost its memory, or one that does not answer. cluster is the
// --cluster flag's value, for the commands it suggests ("" on a region).
func explain(err error, cluster string) string {
	msg := tidy(err)
	node := "NODE"
	if m := nodeName.FindString(msg); m != "" {
		node = m[1:]
	}
	where := "--cluster FILE"
	if cluster != "" {
		where = "--cluster " + cluster
	}
	switch {
	case errors.Is(err, farmem.ErrNodeLost):
		who := "a memory node"
		if node != "NODE" {
			who = "memory node " + node
		}
		return fmt.Sprintf("%s\n%s restarted and lost its memory: the keys it held are gone until the store adopts it.\n"+
			"See `farmem status %s`, then run `farmem adopt %s %s` (the keys it held are then deleted; the others keep working).",
			msg, who, where, where, node)
	case errors.Is(err, farmem.ErrNodeDown):
		return fmt.Sprintf("%s\na memory node does not answer: check its farmemd process, and `farmem status %s`.", msg, where)
	}
	return msg
}
