package kvstore

import "github.com/farmem/farmem/ds/race"

// IdleRaceStats returns the race.Table statistics of the store's idle clients: once a test's
// operations and sessions ended, of every client the store used.
func IdleRaceStats(s *Store) []race.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	var sts []race.Stats
	for _, c := range s.idle {
		if x, ok := c.idx.(*raceIndex); ok {
			sts = append(sts, x.t.Stats())
		}
	}
	return sts
}
