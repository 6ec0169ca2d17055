"""Historical job traces and load series: readers, sacct exports, conversions to events."""
