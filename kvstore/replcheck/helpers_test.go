package replcheck_test

import "github.com/farmem/farmem/kvstore/kvstoretest"

// The fixtures of kvstore's tests, under the names those tests use.
var (
	key        = kvstoretest.Key
	val        = kvstoretest.Val
	unval      = kvstoretest.Unval
	quietAlloc = kvstoretest.QuietAlloc
	newLocal   = kvstoretest.NewLocal
	openStore  = kvstoretest.OpenStore
	startSim   = kvstoretest.StartSim
	semantics  = kvstoretest.Semantics
	readAll    = kvstoretest.ReadAll
	kvModel    = kvstoretest.Model
	mix        = kvstoretest.Mix
)

type (
	kv      = kvstoretest.Scanner
	history = kvstoretest.History
)
