// Replaced by the CPU backend (issue 4).
