package kvstore_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/kvstore"
)

// ProxyIndex maps proxying onto the RACE kinds and refuses it elsewhere, as the table of
// refusals states.
func TestProxyIndex(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ index, proxy, want string }{
		{"race", "", "race"}, {"race", "none", "race"}, {"race", "flexkv", "flexkv"}, {"race", "aceso", "aceso"},
		{"flexkv", "flexkv", "flexkv"}, {"aceso", "aceso", "aceso"}, {"hybrid", "none", "hybrid"}, {"swarm", "", "swarm"},
	} {
		got, err := kvstore.ProxyIndex(c.index, c.proxy)
		require.NoError(t, err, "%v", c)
		require.Equal(t, c.want, got, "%v", c)
	}
	documented := map[string]bool{}
	for _, r := range kvstore.Refusals() {
		if r.Option == "proxy flexkv, aceso (farmem bench --proxy)" {
			documented[r.Index] = true
		}
	}
	for _, c := range []struct{ index, proxy string }{
		{"hybrid", "flexkv"}, {"blink", "aceso"}, {"swarm", "flexkv"}, {"flexkv", "none"}, {"aceso", "flexkv"}, {"flexkv", "aceso"}, {"race", "x"},
	} {
		_, err := kvstore.ProxyIndex(c.index, c.proxy)
		require.ErrorIs(t, err, farmem.ErrInvalid, "%v", c)
		var re *kvstore.RefusalError
		require.ErrorAs(t, err, &re)
		require.Equal(t, c.index, re.Index)
		if c.index != "race" && c.index != "flexkv" && c.index != "aceso" {
			require.True(t, documented[c.index], "%s's refusal of proxying is in the table", c.index)
		}
	}
	require.Len(t, documented, 3, "hybrid, blink and swarm refuse proxying")
}
