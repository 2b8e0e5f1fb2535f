// Package e2e tests Ferry as its users meet it: the real ferry binary, a
// real server on a loopback port, real jobs run by bash and python3.
package e2e
