"""Auto-delegation: child specs with descriptions, and the rule that hands a request to one."""
