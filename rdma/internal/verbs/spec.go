package verbs

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/farmem/farmem/farmem"
)

// DeviceSpec names a device port: "" (the first device, port 1, the GID chosen
// automatically), or "NAME[:PORT[:GID-INDEX]]" such as "mlx5_0", "mlx5_0:1" or "mlx5_0:1:3".
type DeviceSpec struct {
	Name string
	Port int
	// GIDIndex is the port GID table entry to use; -1 chooses: none on InfiniBand, a RoCE v2
	// IPv4-mapped GID (else the first usable one) on Ethernet.
	GIDIndex int
}

// ParseDeviceSpec parses a device spec.
func ParseDeviceSpec(s string) (DeviceSpec, error) {
	d := DeviceSpec{Port: 1, GIDIndex: -1}
	if s == "" {
		return d, nil
	}
	parts := strings.Split(s, ":")
	bad := func(why string) (DeviceSpec, error) {
		return DeviceSpec{}, fmt.Errorf("verbs: device %q: %s (want NAME[:PORT[:GID-INDEX]]): %w", s, why, farmem.ErrInvalid)
	}
	if len(parts) > 3 {
		return bad("too many fields")
	}
	d.Name = parts[0]
	if len(parts) > 1 {
		p, err := strconv.Atoi(parts[1])
		if err != nil || p < 1 || p > 255 {
			return bad("port must be 1..255")
		}
		d.Port = p
	}
	if len(parts) > 2 {
		g, err := strconv.Atoi(parts[2])
		if err != nil || g < 0 || g > 255 {
			return bad("GID index must be 0..255")
		}
		d.GIDIndex = g
	}
	return d, nil
}
