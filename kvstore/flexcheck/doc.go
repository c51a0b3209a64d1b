// Package flexcheck holds the checks of kvstore's FlexKV index proxying (kvstore.FlexKV): its
// round trips, ownership shifts and hand-overs, invalidations, crashes and recovery of proxies
// and their backups, and linearizability on the local transport and the simulator. They live
// apart from kvstore's own tests so that each package's tests stay short. The package has no
// API.
package flexcheck
