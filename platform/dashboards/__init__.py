"""Tools for looking at the indexes by hand: OpenSearch Dashboards saved objects and stored search templates."""
