// Package matrixtest holds the test of kvstore's options matrix (kvstore.Matrix): it opens
// every combination the matrix allows, on the local transport and on the simulator, runs a
// short linearizability check with faults on each (kvstoretest.Workload), and asserts that
// Open refuses every other combination before writing anything. It is a package of its own so
// that kvstore's own tests stay short; it exports nothing.
package matrixtest
