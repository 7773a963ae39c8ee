package sharding

// compareShardIDs, for the external tests that check an order.
var CompareShardIDs = compareShardIDs
