package verbs

import (
	"math/bits"
	"time"
)

// ackUnit is the unit of an RC queue pair's local ACK timeout: 4.096µs × 2^timeout.
const ackUnit = 4096 * time.Nanosecond

// RetryParams picks an RC queue pair's local ACK timeout exponent and retry count for a down
// timeout d: a request to a dead peer exhausts its retries (StatusRetryExcErr) after about
// (retries+1) × 4.096µs × 2^timeout, which is kept under d/2, so the NIC gives up by itself
// well before the queue pair's own down timer — the authority — would. The exponent stays
// within [8, 24] (about 1ms to 69s per attempt): shorter attempts would fire spuriously under
// load.
func RetryParams(d time.Duration) (timeout, retries uint8) {
	retries = 7
	per := d / 2 / time.Duration(retries+1) / ackUnit
	t := 0
	if per > 0 {
		t = bits.Len64(uint64(per)) - 1
	}
	return uint8(min(max(t, 8), 24)), retries
}
