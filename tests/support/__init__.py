"""What jim's tests share: the real CLI with a private home, the test services, golden files,
fakes for faults a real batch system cannot stage, and the adapter conformance suite."""
