// the demo page (written next)
