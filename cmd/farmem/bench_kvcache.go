package main

import (
	"github.com/farmem/farmem/kvstore"
)

// withKVCache applies --kv-cache: off keeps FlexKV's compute-side cache to addresses
// (kvstore.FlexKV.NoKVCache). A kind whose row in kvstore's options matrix has no KV cache
// refuses --kv-cache=false, which would mean nothing there.
func (k indexKind) withKVCache(on bool) (indexKind, error) {
	if on {
		return k, nil
	}
	for _, r := range kvstore.Matrix() {
		if r.Index != k.name {
			continue
		}
		if !r.KVCache {
			return k, usageErr("--kv-cache=false: the %s index keeps no KV cache (kvstore's options matrix: only flexkv does)", k.name)
		}
	}
	kind := k.kind
	k.kind = func() kvstore.IndexKind {
		x := kind()
		if f, ok := x.(*kvstore.FlexKV); ok {
			f.NoKVCache = true
		}
		return x
	}
	return k, nil
}
