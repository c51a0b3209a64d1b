package flexcheck_test

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
)

type kv = kvstoretest.Scanner

var (
	kvModel     = kvstoretest.Model
	stressScale = kvstoretest.StressScale
	openSession = kvstoretest.OpenSession
	shortLeases = kvstoretest.ShortLeases
)
