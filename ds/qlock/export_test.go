package qlock

// GrantOffset is the offset of the grant word in a lock node: the word a queued acquisition
// waits on for its predecessor's hand-over.
const GrantOffset = nodeGrant
