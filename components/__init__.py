"""One ComponentResource per platform concern; versions pinned in `components.versions`."""
