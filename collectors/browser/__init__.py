"""Live browser collection: scripted sessions in headless chromium (Playwright) on a site served from
local files, one `web` trajectory each, the accessibility tree after every action as the observation."""
