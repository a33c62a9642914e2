package mqtt

// Opener is the connection opener the client uses, for the benchmark's
// bare subscriber.
var Opener = opener
