package session

// Exported for the tests of package session_test, which run the manager on
// the real store (storage/sessionsql imports this package).
var ProgressOf = progressOf
