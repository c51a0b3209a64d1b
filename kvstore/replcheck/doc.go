// Package replcheck holds the checks of kvstore's replicated stores: the store whose index and
// metadata are replicated over several memory nodes (kvstore.Options' replication settings),
// its round trips, linearizability on the local transport and the simulator with memory nodes
// crashed, and adoption of its metadata. They live apart from kvstore's own tests so that each
// package's tests stay short. The package has no API.
package replcheck
