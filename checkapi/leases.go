package checkapi

// Quota leases for remote holders (POST /v1/leases and its renew and
// return): a holder takes a batch of units of a rule whose limits all say
// "lease": "auto", admits from it in its own process, and renews or returns
// it with the units it did not use.

// LeaseRequest is the body of POST /v1/leases.
type LeaseRequest struct {
	// Route selects the rule, as a check's does.
	Route string `json:"route"`
	// Subject is who is limited; "" (absent) is one subject shared by all.
	Subject string `json:"subject,omitempty"`
	// Holder names the holder (1-57 letters, digits, '_', '.' or '-'):
	// the store shares units among holders by the demand each reports.
	Holder string `json:"holder"`
	// Want is the holder's demand: the most units it asks for.
	Want int64 `json:"want"`
	// TTLMs is the lease's life in milliseconds (absent: 1000).
	TTLMs int64 `json:"ttl_ms,omitempty"`
}

// RenewRequest is the body of POST /v1/leases/{id}/renew: the old lease's
// unused units go back and a new lease of the same rule and subject is
// asked for.
type RenewRequest struct {
	// Unused is how many of the old lease's units were not admitted
	// (required).
	Unused *int64 `json:"unused"`
	// Route and Subject, when Route is set, are the old lease's (as its
	// take gave them): the rule is the one Route selects now. An id
	// names its lease's rule and subject, so a renew is one store call
	// without them; they save a call only for an id of an older server.
	Route   string `json:"route,omitempty"`
	Subject string `json:"subject,omitempty"`
	Holder  string `json:"holder"`
	Want    int64  `json:"want"`
	TTLMs   int64  `json:"ttl_ms,omitempty"`
}

// LeaseAnswer is the body of a lease call's 200 or 429: the decision of a
// check of cost 1 (the store's, or the failure mode's when the store could
// not answer), and the lease when units were granted.
type LeaseAnswer struct {
	Decision
	// Lease is null when nothing was granted: a deny (429), or a decision
	// of the rule's failure mode (degraded), which decided one request.
	Lease *Lease `json:"lease" yaml:"lease"`
	// Returned, on a renew, is how the old lease ended: "returned",
	// "expired", "finished" or "unknown" (the store did not know it).
	Returned string `json:"returned,omitempty" yaml:"returned,omitempty"`
}

// Lease is a grant: Granted units the holder may admit in its own process
// for UsableForMs from when it sent the call, and must then renew or
// return with the unused ones.
type Lease struct {
	// ID is the store's id, '~', and the lease's rule and subject in
	// unpadded URL-safe base64 (at most 1497 bytes).
	ID          string `json:"id" yaml:"id"`
	Granted     int64  `json:"granted" yaml:"granted"`
	ExpiresInMs int64  `json:"expires_in_ms" yaml:"expires_in_ms"`
	UsableForMs int64  `json:"usable_for_ms" yaml:"usable_for_ms"`
}

// ReturnAnswer is the body of DELETE /v1/leases/{id}'s 200.
type ReturnAnswer struct {
	ID string `json:"id"`
	// Status: "returned" (the unused units went back), "expired" (too
	// late: they stay consumed), "finished" (returned before) or
	// "unknown"; only "returned" changed anything.
	Status string `json:"status"`
}
