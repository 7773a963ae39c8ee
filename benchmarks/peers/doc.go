// Package peers benchmarks Shoal's remote path beside other Go actor
// runtimes' remoting in one harness.
package peers
