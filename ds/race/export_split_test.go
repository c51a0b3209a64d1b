package race

// MaxSplitPoll is maxSplitPoll, for the tests of split waiters.
const MaxSplitPoll = maxSplitPoll
