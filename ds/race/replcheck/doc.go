// Package replcheck holds the checks of ds/race's replicated index (race.Params.IndexReplicas)
// that run the table under crashed memory nodes: linearizability on the simulator and the local
// transport with a minority of replicas crashed mid-run (the first replica included), and
// repopulation of a restarted replica under concurrent operations. They live apart from
// ds/race's own tests so that each package's tests stay short. The package has no API.
package replcheck
