"""harness/evolution"""
