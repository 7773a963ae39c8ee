package sharding

// Settle waits until s's regions have been told of every membership
// change so far, as the in-process cluster does on Join.
func Settle(s *Sharding) { s.settle() }
