"""Hostile submissions for the sandbox and grader-integrity tests."""
