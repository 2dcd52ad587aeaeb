package bucket

// DefaultKeyPrefix starts every Redis key when the daemons are given no
// --key-prefix; the engine and the risk daemon default to it too.
const DefaultKeyPrefix = "tg:"
