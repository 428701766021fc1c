"""The Verify card: run the plan for real (GPU or CPU) and compare it with eager."""
