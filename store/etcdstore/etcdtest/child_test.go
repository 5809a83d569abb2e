package etcdtest_test

import "os"

// childEnv names the environment variable that makes the test binary a
// child process of a test (see TestFaults).
const childEnv = "ETCDTEST_CHILD"

// isChild reports whether this process is such a child.
func isChild() bool { return os.Getenv(childEnv) != "" }
