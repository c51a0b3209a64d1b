package main

import (
	"strings"

	"github.com/farmem/farmem/kvstore"
)

// proxyUsage describes --proxy for --help.
func proxyUsage() string {
	return "FlexKV's index proxying for the RACE index: " + strings.Join(kvstore.ProxyNames(), ", ") +
		" (none: RACE on the memory nodes, --index race; flexkv: proxying and KV cache, --index flexkv; aceso: FlexKV's baseline, an address cache and no proxying, --index aceso); " +
		"other kinds take none only, and --index flexkv or aceso only its own (default: as --index says)"
}

// withProxy applies --proxy to --index (kvstore.ProxyIndex): the index kind's name to use, or
// the options matrix's refusal.
func (bf *benchFlags) withProxy() error {
	name, err := kvstore.ProxyIndex(bf.index, bf.proxy)
	if err != nil {
		return err
	}
	bf.index = name
	return nil
}
