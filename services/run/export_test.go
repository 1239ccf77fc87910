package run

// Again is again, for the tests of a step stuck on a server that died.
var Again = again
