"""The fault suite's tools: hostile messages and chaos scenarios on real services."""
