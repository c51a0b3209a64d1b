package spacecheck_test

import "github.com/farmem/farmem/kvstore/kvstoretest"

// The fixtures of kvstore's tests, under the names those tests use.
var (
	key         = kvstoretest.Key
	val         = kvstoretest.Val
	newLocal    = kvstoretest.NewLocal
	openStore   = kvstoretest.OpenStore
	heapUsed    = kvstoretest.HeapUsed
	stressScale = kvstoretest.StressScale
	shortLeases = kvstoretest.ShortLeases
)

type kv = kvstoretest.Scanner
