package kvstore

import (
	"context"
	"fmt"

	"github.com/farmem/farmem/ds/race"
)

// AuditRace audits the store's RACE index with one pooled client (race.Table.Audit).
func AuditRace(ctx context.Context, s *Store) (race.Census, error) {
	c, err := s.acquire(ctx)
	if err != nil {
		return race.Census{}, err
	}
	x, ok := c.idx.(*raceIndex)
	if !ok {
		s.release(c, nil)
		return race.Census{}, fmt.Errorf("not a race index")
	}
	cen, err := x.t.Audit(ctx)
	s.release(c, err)
	return cen, err
}
