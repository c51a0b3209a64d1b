// Package spacecheck holds the checks of kvstore's far-memory footprint: under sustained
// updates of a fixed key set the heap stops growing (the blocks updates replace are retired
// and reused, on one memory node and across nodes), and a store that runs out of far memory
// fails its inserts cleanly, gets back what deletes free and fills again (on local and cxl,
// with splits refused, and from several clients at once). They live apart from kvstore's own
// tests so that each package's tests stay short. The package has no API.
package spacecheck
