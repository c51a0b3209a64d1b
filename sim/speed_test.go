package sim_test

import "os"

var speedTest = os.Getenv("SIM_SPEED") != ""
