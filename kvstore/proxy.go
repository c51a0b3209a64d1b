package kvstore

import (
	"fmt"
	"slices"
	"strings"
)

// # Proxying as an option
//
// FlexKV's index proxying is a property of the RACE index: kinds flexkv (RACE with proxying and
// its KV cache) and aceso (FlexKV's baseline: RACE with its address cache, no proxying) are
// RACE with proxying chosen. ProxyIndex maps that choice, as a command line states it beside
// the index (farmem bench --index race --proxy flexkv), onto the kinds of the matrix, and
// refuses it for the kinds that are not RACE.

// proxyKinds maps each proxying choice to the RACE kind that makes it, in ProxyNames's order.
var proxyKinds = []struct{ proxy, kind string }{
	{"none", "race"},
	{"flexkv", "flexkv"},
	{"aceso", "aceso"},
}

// ProxyNames returns the proxying choices ProxyIndex takes: none (RACE on the memory nodes),
// flexkv (FlexKV's proxying and KV cache), aceso (FlexKV's Aceso-like baseline: an address
// cache, no proxying).
func ProxyNames() []string {
	out := make([]string, len(proxyKinds))
	for i, p := range proxyKinds {
		out[i] = p.proxy
	}
	return out
}

// ProxyIndex returns the index kind's name that index with proxying proxy is: proxy "" leaves
// index as it is; on race, none, flexkv and aceso choose kinds race, flexkv and aceso; on
// flexkv and aceso, the choice must be the kind's own; on the other kinds only none is taken.
// A refused combination returns a *RefusalError (wrapping farmem.ErrInvalid); an unknown
// choice an error wrapping farmem.ErrInvalid too.
func ProxyIndex(index, proxy string) (string, error) {
	if proxy == "" {
		return index, nil
	}
	i := slices.IndexFunc(proxyKinds, func(p struct{ proxy, kind string }) bool { return p.proxy == proxy })
	if i < 0 {
		return "", &RefusalError{Index: index, Option: "proxy " + proxy, Why: "no such proxying (want one of " + strings.Join(ProxyNames(), ", ") + ")"}
	}
	want := proxyKinds[i].kind
	family := slices.ContainsFunc(proxyKinds, func(p struct{ proxy, kind string }) bool { return p.kind == index })
	switch {
	case index == "race" || index == want:
		return want, nil
	case family:
		return "", &RefusalError{Index: index, Option: "proxy " + proxy,
			Why: fmt.Sprintf("the %s kind is RACE with proxying %s; RACE with proxying %s is the %s kind", index, ownProxy(index), proxy, want)}
	case proxy == "none":
		return index, nil
	}
	return "", &RefusalError{Index: index, Option: "proxy " + proxy, Why: proxyWhy}
}

const proxyWhy = "FlexKV's proxying partitions a RACE table among the compute nodes (the flexkv and aceso kinds): this kind is not RACE"

// ownProxy is the proxying choice a RACE kind makes.
func ownProxy(kind string) string {
	for _, p := range proxyKinds {
		if p.kind == kind {
			return p.proxy
		}
	}
	return "none"
}
