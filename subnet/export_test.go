package subnet

// The per-application and per-pool decisions, for tests: runners use Decide
// or a Manager.
var (
	DecideApplication = decideApplication
	DecideReclaim     = decideReclaim
)

// AutoPoolName is Spiderpool's name of an auto-pool, the first of
// AutoPoolNames.
var AutoPoolName = spiderpoolName

// AppLabels are the matchLabels of the podAffinity of an application's
// auto-pools.
var AppLabels = appLabels
