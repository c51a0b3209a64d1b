// Package farcoll holds typed far containers built on package far and the structures below
// it: Array (a fixed-length far array of T, bulk reads and writes in one round trip), Map (a
// typed map over kvstore, with key and value encodings) and Queue (a bounded multi-producer,
// multi-consumer far queue). Each type's doc states its layout, its costs in round trips and
// what is atomic.
//
// Like package far, it uses only the user-facing contract (farmem.Memory's verbs and
// batches, alloc, kvstore), takes time only from the client's farmem.Runtime, starts no
// goroutine and holds no Go lock, so it runs unchanged on the simulator.
package farcoll
