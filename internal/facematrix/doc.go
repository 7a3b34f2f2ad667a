// Package facematrix holds only a test: the same rules and store states
// checked through every face of Sluice (the HTTP check API, the Envoy rate
// limit service, the net/http middleware and the gateway), which must all
// give the client the same answer, since the check engine decides it once.
package facematrix
