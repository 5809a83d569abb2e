package subnet

// The per-application and per-pool decisions, for tests: runners use Decide
// or a Manager.
var (
	DecideApplication = decideApplication
	DecideReclaim     = decideReclaim
)
