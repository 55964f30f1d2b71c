"""Skills: SKILL.md folders read into a registry, activated by the model, narrowing its tools."""
